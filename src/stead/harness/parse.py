"""A model's answer -> the session events that record it (buffered, in block order)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stead.events import EventType
from stead.harness.context import BUILTIN_NAMES, custom_tools, enabled_builtin_tools
from stead.harness.mcp import EnabledMcpTool, McpTool, enabled_mcp_tools, mcp_tool_enabled
from stead.harness.memory import MEMORY_SEARCH
from stead.harness.urls import fetch_refusal
from stead.jsonvalues import Json

NewEventSpec = tuple[str, Json]
"""(event type, body) — the runtime gives each an id."""


def _evaluation(policy: Json) -> tuple[str, Json]:
    kind = policy.get("type", "always_allow")
    if kind == "always_allow":
        return "allow", {"type": "always_allow"}
    if kind == "always_ask":
        return "ask", {"type": "always_ask"}
    # stead makes no automatic risk judgement: an `auto` policy asks the user.
    verdict = {"type": "ask", "reason_code": "no_automatic_evaluation"}
    return "ask", {"type": "auto", "evaluated_permission": verdict}


def _tool_use(
    block: Json,
    agent: Json,
    events: Sequence[Json],
    mcp: Mapping[str, EnabledMcpTool],
    memory_search: bool,
) -> NewEventSpec:
    name, tool_input = block["name"], block.get("input") or {}
    if name in custom_tools(agent):
        return EventType.AGENT_CUSTOM_TOOL_USE, {"name": name, "input": tool_input}
    if memory_search and name == MEMORY_SEARCH:
        # stead's own tool, offered with the session's memory stores: it only reads.
        permission, evaluation = _evaluation({"type": "always_allow"})
        return EventType.AGENT_TOOL_USE, {
            "name": name,
            "input": tool_input,
            "evaluated_permission": permission,
            "evaluation": evaluation,
        }
    found = mcp.get(name)
    if found is not None:
        permission, evaluation = _evaluation(found.permission_policy)
        return EventType.AGENT_MCP_TOOL_USE, {
            "mcp_server_name": found.tool.server,
            "name": found.tool.name,
            "input": tool_input,
            "evaluated_permission": permission,
            "evaluation": evaluation,
        }
    config = enabled_builtin_tools(agent).get(name)
    refusal = None
    if config is None:
        refusal = f"the tool {name!r} is not available to this agent"
    elif name == "web_fetch" and isinstance(tool_input, dict):
        refusal = fetch_refusal(tool_input.get("url"), events, agent, config)
    if config is None or refusal is not None:
        # Refused before any permission policy applies: no ``evaluation``.
        body = {"name": name, "input": tool_input, "evaluated_permission": "deny"}
        return EventType.AGENT_TOOL_USE, {**body, "_internal": {"refusal": refusal}}
    permission, evaluation = _evaluation(config["permission_policy"])
    return EventType.AGENT_TOOL_USE, {
        "name": name,
        "input": tool_input,
        "evaluated_permission": permission,
        "evaluation": evaluation,
    }


def response_events(
    content: list[Json],
    agent: Json,
    events: Sequence[Json],
    mcp_tools: Sequence[McpTool] = (),
    *,
    memory_search: bool = False,
) -> list[NewEventSpec]:
    """The events that record the model's answer ``content`` to a request built
    from the log ``events``; ``mcp_tools``: the ones the request offered
    (``build_request``); ``memory_search``: it offered the memory search tool."""
    mcp = enabled_mcp_tools(agent, mcp_tools) if mcp_tools else {}
    answer: list[NewEventSpec] = []
    text: list[Json] = []

    def flush_text() -> None:
        if text:
            answer.append((EventType.AGENT_MESSAGE, {"content": list(text)}))
            text.clear()

    for block in content:
        kind = block.get("type")
        if kind == "text":
            if block.get("text"):
                text.append({"type": "text", "text": block["text"]})
            continue
        flush_text()
        if kind == "thinking":
            internal = {
                "thinking": block.get("thinking", ""),
                "signature": block.get("signature", ""),
            }
            answer.append((EventType.AGENT_THINKING, {"_internal": internal}))
        elif kind == "redacted_thinking":
            answer.append(
                (EventType.AGENT_THINKING, {"_internal": {"redacted": block.get("data", "")}})
            )
        elif kind == "tool_use":
            answer.append(_tool_use(block, agent, events, mcp, memory_search))
    flush_text()
    return answer


def withdrawn(agent: Json, use: Json) -> str | None:
    """Why the logged tool use ``use`` may not run under ``agent`` as it is now,
    if it may not: a call asked for confirmation waits while the session is
    idle, and ``sessions.update`` may disable its tool (or remove its server)
    meanwhile. Confirmed after that, it must not run."""
    name = use.get("name")
    if use["type"] == EventType.AGENT_MCP_TOOL_USE:
        server = use.get("mcp_server_name")
        if not isinstance(server, str) or not isinstance(name, str):
            return None
        if mcp_tool_enabled(agent, server, name):
            return None
        return (
            f"the tool {name!r} of the MCP server {server!r} is no longer available to "
            "this agent: the session's tools were changed before the call could run"
        )
    if use["type"] == EventType.AGENT_TOOL_USE and name in BUILTIN_NAMES:
        if name in enabled_builtin_tools(agent):
            return None
        return (
            f"the tool {name!r} is no longer available to this agent: the session's "
            "tools were changed before the call could run"
        )
    return None
