"""The harness room: the stateless part of the agent loop.

Log events in, a model request and new events out (DESIGN rule 3). Imports no
store, sandbox or api: the runtime hands it events and tool definitions.
"""

from stead.harness.compaction import (
    SUMMARY_INSTRUCTION,
    Compact,
    CompactionLimit,
    ContextLimits,
    compacted_body,
    plan_compaction,
)
from stead.harness.context import (
    Rendering,
    build_messages,
    build_request,
    custom_tools,
    enabled_builtin_tools,
    rendering,
    request_with,
)
from stead.harness.mcp import McpTool, servers_in_use, within_room
from stead.harness.media import media_bytes, megabytes
from stead.harness.memory import (
    MEMORY_SEARCH,
    MemoryPrompt,
    memory_prompts,
    memory_search_offered,
)
from stead.harness.model import (
    AnswerObserver,
    ModelClient,
    ModelRequest,
    ModelResponse,
    UpstreamError,
)
from stead.harness.parse import response_events, withdrawn
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
from stead.harness.windows import MediaTokens, context_window

__all__ = [
    "MEMORY_SEARCH",
    "SKILLS_ROOT",
    "SUMMARY_INSTRUCTION",
    "TOOL_USE_TYPES",
    "AnswerObserver",
    "AnthropicModel",
    "AwaitInput",
    "CallModel",
    "Compact",
    "CompactionLimit",
    "ContextLimits",
    "EndTurn",
    "McpTool",
    "MediaTokens",
    "MemoryPrompt",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "OpenAICompatibleModel",
    "Rendering",
    "RunTools",
    "SkillPrompt",
    "Step",
    "UpstreamError",
    "build_messages",
    "build_request",
    "compacted_body",
    "context_window",
    "custom_tools",
    "enabled_builtin_tools",
    "media_bytes",
    "megabytes",
    "memory_prompts",
    "memory_search_offered",
    "next_step",
    "plan_compaction",
    "rendering",
    "request_with",
    "response_events",
    "servers_in_use",
    "unresolved_tool_uses",
    "withdrawn",
    "within_room",
]
