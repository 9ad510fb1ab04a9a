"""Model providers: one module per upstream protocol, each mapping its own errors."""

from stead.harness.providers.anthropic import AnthropicModel
from stead.harness.providers.openai import OpenAICompatibleModel

__all__ = ["AnthropicModel", "OpenAICompatibleModel"]
