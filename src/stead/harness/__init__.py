"""The harness room: the stateless part of the agent loop.

Log events in, a model request and new events out (DESIGN rule 3). Imports no
store, sandbox or api: the runtime hands it events and tool definitions.
"""

from stead.harness.context import build_request, custom_tools, enabled_builtin_tools
from stead.harness.mcp import McpTool, servers_in_use
from stead.harness.model import ModelClient, ModelRequest, ModelResponse, UpstreamError
from stead.harness.parse import response_events
from stead.harness.providers import AnthropicModel, OpenAICompatibleModel
from stead.harness.skills import SKILLS_ROOT, SkillPrompt
from stead.harness.steps import (
    TOOL_USE_TYPES,
    AwaitInput,
    CallModel,
    EndTurn,
    RunTools,
    Step,
    next_step,
    unresolved_tool_uses,
)

__all__ = [
    "SKILLS_ROOT",
    "TOOL_USE_TYPES",
    "AnthropicModel",
    "AwaitInput",
    "CallModel",
    "EndTurn",
    "McpTool",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "OpenAICompatibleModel",
    "RunTools",
    "SkillPrompt",
    "Step",
    "UpstreamError",
    "build_request",
    "custom_tools",
    "enabled_builtin_tools",
    "next_step",
    "response_events",
    "servers_in_use",
    "unresolved_tool_uses",
]
