"""MCP tools in the stateless harness: which are offered, by which name, under
which policy, and how their uses and results go back into the context."""

from __future__ import annotations

from typing import Any

from stead.harness import McpTool, RunTools, build_request, next_step, response_events
from stead.harness.mcp import MODEL_NAME_LIMIT, model_tool_name, servers_in_use

Json = dict[str, Any]
ALLOW = {"type": "always_allow"}
ASK = {"type": "always_ask"}


def _agent(default_enabled: bool = True, configs: list[Json] | None = None) -> Json:
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "docs",
        "default_config": {"enabled": default_enabled, "permission_policy": ASK},
        "configs": configs or [],
    }
    return {
        "model": {"id": "claude-test"},
        "mcp_servers": [{"type": "url", "name": "docs", "url": "http://docs.test/mcp"}],
        "tools": [toolset],
    }


TOOLS = (
    McpTool("docs", "search", "Searches.", {"type": "object", "properties": {"q": {}}}),
    McpTool("docs", "delete", "Deletes.", {"type": "object"}),
)


def test_model_names_fit_the_messages_api_and_never_collide() -> None:
    assert model_tool_name("docs", "search") == "mcp__docs__search"
    odd = model_tool_name("my server", "tool.v2")
    other = model_tool_name("my server", "tool/v2")
    assert odd != other and " " not in odd and "." not in odd
    long = model_tool_name("s" * 100, "t" * 100)
    assert len(long) <= MODEL_NAME_LIMIT
    assert long != model_tool_name("s" * 100, "t" * 99 + "u")
    # Where the server's name ends is never in doubt.
    assert model_tool_name("a", "b__c") == "mcp__a__b__c" != model_tool_name("a__b", "c")
    assert model_tool_name("a", "__b") != model_tool_name("a_", "_b")


def test_configs_enable_disable_and_set_policies_per_tool() -> None:
    agent = _agent(configs=[{"name": "delete", "enabled": False, "permission_policy": ASK}])
    request = build_request(agent, [], {}, max_tokens=100, mcp_tools=TOOLS)
    assert [t["name"] for t in request.tools] == ["mcp__docs__search"]
    only_search = _agent(
        default_enabled=False,
        configs=[{"name": "search", "enabled": True, "permission_policy": ALLOW}],
    )
    assert servers_in_use(only_search) == only_search["mcp_servers"]
    assert servers_in_use(_agent(default_enabled=False)) == []
    block = {"type": "tool_use", "id": "t1", "name": "mcp__docs__search", "input": {"q": "x"}}
    ((kind, body),) = response_events([block], only_search, [], TOOLS)
    assert kind == "agent.mcp_tool_use"
    assert (body["mcp_server_name"], body["name"], body["evaluated_permission"]) == (
        "docs",
        "search",
        "allow",
    )
    refused = {**block, "name": "mcp__docs__delete"}
    ((kind, body),) = response_events([refused], only_search, [], TOOLS)
    assert (kind, body["evaluated_permission"]) == ("agent.tool_use", "deny")


def test_uses_and_results_rebuild_the_same_context() -> None:
    agent = _agent(configs=[{"name": "search", "enabled": True, "permission_policy": ALLOW}])
    log: list[Json] = [
        {"type": "user.message", "id": "u1", "content": [{"type": "text", "text": "find"}]},
        {"type": "span.model_request_start", "id": "s1"},
        {
            "type": "agent.mcp_tool_use",
            "id": "m1",
            "mcp_server_name": "docs",
            "name": "search",
            "input": {"q": "x"},
            "evaluated_permission": "allow",
        },
        {"type": "span.model_request_end", "id": "e1", "model_request_start_id": "s1"},
    ]
    step = next_step(log)
    assert isinstance(step, RunTools) and [u["id"] for u in step.run] == ["m1"]
    log.append(
        {
            "type": "agent.mcp_tool_result",
            "id": "r1",
            "mcp_tool_use_id": "m1",
            "content": [{"type": "text", "text": "found"}],
        }
    )
    request = build_request(agent, log, {}, max_tokens=100, mcp_tools=TOOLS)
    assistant, user = request.messages[1], request.messages[2]
    assert assistant["content"][0]["name"] == "mcp__docs__search"
    assert user["content"][0]["tool_use_id"] == "m1"
    assert request == build_request(agent, log, {}, max_tokens=100, mcp_tools=TOOLS)
