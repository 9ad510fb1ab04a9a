"""MCP tools as the model sees them: which of a server's tools an agent's
``mcp_toolset`` enables, under which permission policy, and by which name.

The model knows an MCP tool as ``mcp__<server>__<tool>``, so two servers may
offer tools of one name; the log keeps the server and tool names apart
(``agent.mcp_tool_use``), and the model name is worked out from them again
when the context is rebuilt (rule 3).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from stead.jsonvalues import Json
from stead.schemas import agents

MCP_TOOLSET = "mcp_toolset"
MODEL_NAME_LIMIT = 128
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class McpTool:
    """A tool an MCP server listed (the runtime discovers them)."""

    server: str
    """The agent's name for the server (``mcp_servers[].name``)."""
    name: str
    description: str
    input_schema: Json
    read_only: bool = False
    """The server says the tool changes nothing: a call in doubt may run again."""

    @property
    def model_name(self) -> str:
        return model_tool_name(self.server, self.name)


@dataclass(frozen=True, slots=True)
class EnabledMcpTool:
    tool: McpTool
    permission_policy: Json


def model_tool_name(server: str, tool: str) -> str:
    """The name the model calls ``tool`` of ``server`` by: the Messages API takes
    1-128 characters of A-Z, a-z, 0-9, _ and -; a name that needs changing to
    fit gets a hash of the original, so two tools never share one. So does one
    whose server name could end elsewhere (it holds ``__`` or ends with ``_``):
    server ``a__b``'s tool ``c`` and server ``a``'s tool ``b__c`` differ."""
    wanted = f"{agents.MCP_TOOL_PREFIX}{server}__{tool}"
    plain = "__" not in server and not server.endswith("_")
    if plain and len(wanted) <= MODEL_NAME_LIMIT and not _NOT_ALLOWED.search(wanted):
        return wanted
    digest = hashlib.sha256(wanted.encode()).hexdigest()[:10]
    return _NOT_ALLOWED.sub("_", wanted)[: MODEL_NAME_LIMIT - 11] + "_" + digest


def mcp_toolsets(agent: Json) -> dict[str, Json]:
    """Server name -> the agent's (resolved) ``mcp_toolset`` for it."""
    return {t["mcp_server_name"]: t for t in agent.get("tools", []) if t["type"] == MCP_TOOLSET}


def servers_in_use(agent: Json) -> list[Json]:
    """The agent's ``mcp_servers`` whose toolset may enable a tool: the ones
    whose tools must be discovered."""
    toolsets = mcp_toolsets(agent)
    used = []
    for server in agent.get("mcp_servers", []):
        toolset = toolsets.get(server["name"])
        if toolset is None:
            continue
        if toolset["default_config"]["enabled"] or any(
            c.get("enabled") for c in toolset.get("configs", [])
        ):
            used.append(server)
    return used


def enabled_mcp_tools(agent: Json, discovered: Iterable[McpTool]) -> dict[str, EnabledMcpTool]:
    """Model name -> each discovered tool the agent's toolsets enable."""
    toolsets = mcp_toolsets(agent)
    enabled: dict[str, EnabledMcpTool] = {}
    for tool in discovered:
        toolset = toolsets.get(tool.server)
        if toolset is None:
            continue
        default = toolset["default_config"]
        config: Mapping[str, object] = next(
            (c for c in toolset.get("configs", []) if c["name"] == tool.name), {}
        )
        on = config.get("enabled")
        if default["enabled"] if on is None else on:
            policy = config.get("permission_policy") or default["permission_policy"]
            assert isinstance(policy, dict)
            enabled[tool.model_name] = EnabledMcpTool(tool, policy)
    return enabled


def mcp_tool_enabled(agent: Json, server: str, tool: str) -> bool:
    """Whether the agent's toolsets enable ``tool`` of its server ``server`` (one
    the agent still names)."""
    if not any(s["name"] == server for s in agent.get("mcp_servers", [])):
        return False
    toolset = mcp_toolsets(agent).get(server)
    if toolset is None:
        return False
    config: Mapping[str, object] = next(
        (c for c in toolset.get("configs", []) if c["name"] == tool), {}
    )
    on = config.get("enabled")
    return bool(toolset["default_config"]["enabled"] if on is None else on)


def within_room(
    agent: Json, tools: Sequence[McpTool], room: int
) -> tuple[tuple[McpTool, ...], dict[str, int]]:
    """``tools`` without the ones the agent enables past the first ``room`` (the
    tools it may offer beside its own: ``agents.MAX_TOOLS`` in all), in order;
    and how many of each server's were left out. A server may list hundreds."""
    enabled = enabled_mcp_tools(agent, tools)
    kept: list[McpTool] = []
    left_out: dict[str, int] = {}
    for tool in tools:
        if tool.model_name in enabled:
            if room <= 0:
                left_out[tool.server] = left_out.get(tool.server, 0) + 1
                continue
            room -= 1
        kept.append(tool)
    return tuple(kept), left_out


def definition(tool: McpTool) -> Json:
    schema = dict(tool.input_schema) or {"type": "object"}
    return {"name": tool.model_name, "description": tool.description, "input_schema": schema}
