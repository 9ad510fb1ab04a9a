"""MCP toolsets in sessions, through the official SDK against a real server, the
fake model and a real MCP server on loopback (the ``mcp`` SDK's): tools listed
and offered to the model, called with the session's vault credentials, asked
for first by default, refreshed after a 401, failures reported, and a call
that completed never made again after a SIGKILL."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stead.testing import FakeModel, ServeForker, ServerProcess, Text, ToolCall, Turn, free_port
from stead.testing.mcp_server import FakeMcpServer
from stead.testing.scripts import assistant_turns
from tests.conftest import client_tls, loop_env, sdk_of, serving
from tests.integration.helpers import wait_idle

Json = dict[str, Any]
ECHO = "mcp__tools__echo"
REFUSE = "mcp__tools__refuse"
WHOAMI = "mcp__tools__whoami"


def _first_text(body: Json) -> str:
    for message in body.get("messages", []):
        for block in message["content"]:
            if message["role"] == "user" and block.get("type") == "text":
                return str(block["text"])
    return ""


def script(body: Json) -> Turn:
    """Calls ``echo`` with the session's first words once, if it is offered
    (``refuse`` or ``whoami`` if they start with "refuse-" or "whoami-"); then
    says which tools it was offered."""
    offered = sorted(t["name"] for t in body.get("tools", []))
    words = _first_text(body)
    if assistant_turns(body) == 0 and words.startswith("refuse-") and REFUSE in offered:
        return Turn([ToolCall(REFUSE, {"why": words})])
    if assistant_turns(body) == 0 and words.startswith("whoami-") and WHOAMI in offered:
        return Turn([ToolCall(WHOAMI, {})])
    if assistant_turns(body) == 0 and ECHO in offered:
        return Turn([ToolCall(ECHO, {"text": words})])
    return Turn([Text("offered: " + ",".join(offered))])


@pytest.fixture(scope="module")
def mcp() -> Iterator[FakeMcpServer]:
    server = FakeMcpServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(script) as model:
        yield model


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("mcp"), loop_env(fake), forker)


@pytest.fixture
def sdk(served: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(served) as client:
        yield client


def _session(
    sdk: anthropic.Anthropic,
    url: str,
    auth: Json | None,
    *,
    policy: str | None = "always_allow",
    networking: Json | None = None,
) -> str:
    toolset: Json = {"type": "mcp_toolset", "mcp_server_name": "tools"}
    if policy is not None:
        toolset["default_config"] = {"permission_policy": {"type": policy}}
    agent = sdk.beta.agents.create(
        name="mcp",
        model="claude-sonnet-4-6",
        mcp_servers=[{"type": "url", "name": "tools", "url": url}],
        tools=[toolset],  # type: ignore[list-item]
    )
    config: Json = {"type": "cloud"}
    if networking is not None:
        config["networking"] = networking
    env = sdk.beta.environments.create(name=f"mcp-{uuid.uuid4().hex[:8]}", config=config)  # type: ignore[arg-type]
    vault_ids = []
    if auth is not None:
        vault = sdk.beta.vaults.create(display_name="mcp")
        sdk.beta.vaults.credentials.create(vault.id, auth=auth)  # type: ignore[arg-type]
        vault_ids.append(vault.id)
    return sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=vault_ids).id


def _bearer(mcp: FakeMcpServer, token: str) -> Json:
    return {"type": "static_bearer", "mcp_server_url": mcp.url, "token": token}


def _say(sdk: anthropic.Anthropic, session_id: str, text: str) -> list[Json]:
    sdk.beta.sessions.events.send(
        session_id, events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}]
    )
    wait_idle(sdk, session_id)
    return _events(sdk, session_id)


def _events(sdk: anthropic.Anthropic, session_id: str) -> list[Json]:
    return [e.model_dump(mode="json") for e in sdk.beta.sessions.events.list(session_id)]


def _one(events: list[Json], kind: str) -> Json:
    found = [e for e in events if e["type"] == kind]
    assert len(found) == 1, [e["type"] for e in events]
    return found[0]


def test_a_tool_is_listed_called_with_the_vault_token_and_answered(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer, served: ServerProcess
) -> None:
    token = mcp.issue_token()
    session_id = _session(sdk, mcp.url, _bearer(mcp, token))
    words = f"hello-{uuid.uuid4().hex[:8]}"
    events = _say(sdk, session_id, words)
    use = _one(events, "agent.mcp_tool_use")
    assert (use["mcp_server_name"], use["name"], use["input"]) == ("tools", "echo", {"text": words})
    assert use["evaluated_permission"] == "allow"
    result = _one(events, "agent.mcp_tool_result")
    assert result["mcp_tool_use_id"] == use["id"] and not result["is_error"]
    assert result["content"] == [{"type": "text", "text": words}]
    assert ("echo", {"text": words}) in mcp.tool_calls
    assert token in mcp.seen_tokens
    answer = [e for e in events if e["type"] == "agent.message"][-1]
    assert answer["content"][0]["text"] == f"offered: mcp__tools__add,{ECHO},{REFUSE},{WHOAMI}"
    assert events[-1]["stop_reason"]["type"] == "end_turn"
    assert token not in json.dumps(events) and token not in served.log_text()


def test_the_default_policy_asks_before_calling(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    session_id = _session(sdk, mcp.url, _bearer(mcp, mcp.issue_token()), policy=None)
    words = f"ask-{uuid.uuid4().hex[:8]}"
    events = _say(sdk, session_id, words)
    use = _one(events, "agent.mcp_tool_use")
    assert (use["evaluated_permission"], use["evaluation"]["type"]) == ("ask", "always_ask")
    assert events[-1]["stop_reason"] == {"type": "requires_action", "event_ids": [use["id"]]}
    assert ("echo", {"text": words}) not in mcp.tool_calls
    confirm = {"type": "user.tool_confirmation", "tool_use_id": use["id"], "result": "allow"}
    sdk.beta.sessions.events.send(session_id, events=[confirm])  # type: ignore[list-item]
    wait_idle(sdk, session_id)
    events = _events(sdk, session_id)
    assert _one(events, "agent.mcp_tool_result")["content"][0]["text"] == words
    assert mcp.tool_calls.count(("echo", {"text": words})) == 1


def test_a_call_confirmed_after_its_tool_was_disabled_is_not_made(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    """sessions.update disabled the tool while the call waited for its
    confirmation: the server is still the agent's, but the call is not made."""
    session_id = _session(sdk, mcp.url, _bearer(mcp, mcp.issue_token()), policy=None)
    words = f"withdrawn-{uuid.uuid4().hex[:8]}"
    use = _one(_say(sdk, session_id, words), "agent.mcp_tool_use")
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "tools",
        "configs": [{"name": "echo", "enabled": False}],
    }
    sdk.beta.sessions.update(session_id, agent={"tools": [toolset]})  # type: ignore[list-item]
    confirm = {"type": "user.tool_confirmation", "tool_use_id": use["id"], "result": "allow"}
    sdk.beta.sessions.events.send(session_id, events=[confirm])  # type: ignore[list-item]
    wait_idle(sdk, session_id)
    events = _events(sdk, session_id)
    result = _one(events, "agent.mcp_tool_result")
    assert result["is_error"] and "no longer available" in result["content"][0]["text"]
    assert ("echo", {"text": words}) not in mcp.tool_calls
    assert events[-1]["stop_reason"]["type"] == "end_turn"


def test_a_call_the_server_refuses_is_its_error_for_the_model_not_a_connection_failure(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    """The SDK's server answers a JSON-RPC error with HTTP 400: what the model
    sees is the server's message, and the server stays usable."""
    session_id = _session(sdk, mcp.url, _bearer(mcp, mcp.issue_token()))
    words = f"refuse-{uuid.uuid4().hex[:8]}"
    events = _say(sdk, session_id, words)
    result = _one(events, "agent.mcp_tool_result")
    assert result["is_error"]
    assert f"refused: {words}" in result["content"][0]["text"]
    assert not [e for e in events if e["type"] == "session.error"]
    assert ("refuse", {"why": words}) in mcp.tool_calls


def test_a_token_the_server_echoes_reaches_neither_the_log_nor_the_model(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer, fake: FakeModel, served: ServerProcess
) -> None:
    token = mcp.issue_token()
    session_id = _session(sdk, mcp.url, _bearer(mcp, token))
    events = _say(sdk, session_id, f"whoami-{uuid.uuid4().hex[:8]}")
    result = _one(events, "agent.mcp_tool_result")
    assert result["content"] == [{"type": "text", "text": "you are [redacted]"}]
    assert ("whoami", {}) in mcp.tool_calls and token in mcp.seen_tokens
    assert token not in json.dumps(events) and token not in served.log_text()
    assert not any(token in json.dumps(r.body) for r in fake.requests)


def _tools_offered(
    sdk: anthropic.Anthropic, fake: FakeModel, server: FakeMcpServer
) -> tuple[list[Json], set[str]]:
    """Starts ``server``, runs one turn of a new session whose agent uses it,
    stops it: the turn's events, and the names of the tools the turn's first
    model request offered."""
    server.start()
    try:
        session_id = _session(sdk, server.url, _bearer(server, server.issue_token()))
        before = len(fake.requests)
        events = _say(sdk, session_id, f"tools-{uuid.uuid4().hex[:8]}")
    finally:
        server.stop()
    sent = [r.body for r in fake.requests[before:] if r.body.get("tools")]
    assert sent, events
    return events, {t["name"] for t in sent[0]["tools"]}


def test_a_tool_whose_input_schema_is_not_a_json_schema_is_left_out(
    sdk: anthropic.Anthropic, fake: FakeModel
) -> None:
    """The Messages API refuses a request with such a tool: offered, it would
    fail every model request of the session."""
    odd = FakeMcpServer(
        odd_schemas={
            "bad_type": {"type": "object", "properties": {"a": {"type": "nonsense"}}},
            "bad_required": {"type": "object", "required": "a"},
            "fine": {"type": "object", "properties": {"a": {"type": "string"}}},
        }
    )
    events, offered = _tools_offered(sdk, fake, odd)
    assert "mcp__tools__fine" in offered and ECHO in offered
    assert not offered & {"mcp__tools__bad_type", "mcp__tools__bad_required"}
    assert events[-1]["stop_reason"]["type"] == "end_turn"


def test_a_tool_the_mcp_sdk_refuses_to_list_is_left_out_not_the_whole_list(
    sdk: anthropic.Anthropic, fake: FakeModel
) -> None:
    """The ``mcp`` SDK checks a listing whole: one tool whose input schema's type
    is not ``object`` (or that has none) failed it, and the server offered no
    tool at all (``mcp_connection_failed_error`` with pydantic's message)."""
    raw = [
        {"name": "not_object", "description": "x", "inputSchema": {"type": "string"}},
        {"name": "no_schema", "description": "x"},
    ]
    events, offered = _tools_offered(sdk, fake, FakeMcpServer(raw_tools=raw))
    assert not [e for e in events if e["type"] == "session.error"], events
    assert ECHO in offered and "mcp__tools__add" in offered
    assert not offered & {"mcp__tools__not_object", "mcp__tools__no_schema"}
    assert events[-1]["stop_reason"]["type"] == "end_turn"


def test_a_server_listing_hundreds_of_tools_is_held_to_the_tool_limit(
    sdk: anthropic.Anthropic, fake: FakeModel
) -> None:
    """An agent offers at most 256 tools across its toolsets; an mcp_toolset
    counts as the tools it configures, so a server that lists 300 had every
    one offered (with the agent's own: 304 in each request)."""
    raw = [
        {"name": f"many_{i:03d}", "description": "x", "inputSchema": {"type": "object"}}
        for i in range(300)
    ]
    many = FakeMcpServer(raw_tools=raw).start()
    try:
        session_id = _session(sdk, many.url, _bearer(many, many.issue_token()))
        before = len(fake.requests)
        events = _say(sdk, session_id, f"many-{uuid.uuid4().hex[:8]}")
        _say(sdk, session_id, "again")  # the kept list: held to the limit alike
    finally:
        many.stop()
    sent = [r.body for r in fake.requests[before:] if r.body.get("tools")]
    assert len(sent) >= 2, events
    for body in sent:
        offered = [t["name"] for t in body["tools"]]
        assert len(offered) == 256 and ECHO in offered
        assert "mcp__tools__many_251" in offered and "mcp__tools__many_252" not in offered
    error = _one(events, "session.error")["error"]
    assert error["message"].startswith("tools: 48 of the MCP server's tools were left out")
    assert events[-1]["stop_reason"]["type"] == "end_turn"


def test_a_denied_call_is_answered_without_calling(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    session_id = _session(sdk, mcp.url, _bearer(mcp, mcp.issue_token()), policy="always_ask")
    words = f"deny-{uuid.uuid4().hex[:8]}"
    use = _one(_say(sdk, session_id, words), "agent.mcp_tool_use")
    deny = {
        "type": "user.tool_confirmation",
        "tool_use_id": use["id"],
        "result": "deny",
        "deny_message": "not that one",
    }
    sdk.beta.sessions.events.send(session_id, events=[deny])  # type: ignore[list-item]
    wait_idle(sdk, session_id)
    result = _one(_events(sdk, session_id), "agent.mcp_tool_result")
    assert result["is_error"] and "not that one" in result["content"][0]["text"]
    assert ("echo", {"text": words}) not in mcp.tool_calls


def _expired_oauth(server: FakeMcpServer) -> Json:
    """An ``mcp_oauth`` credential for ``server`` whose access token it refuses
    (expired), with a refresh token it takes."""
    expired = server.issue_token()
    server.revoke(expired)
    return {
        "type": "mcp_oauth",
        "mcp_server_url": server.url,
        "access_token": expired,
        "refresh": {
            "client_id": server.client.client_id,
            "refresh_token": server.issue_refresh_token(),
            "token_endpoint": server.token_url,
            "token_endpoint_auth": {"type": "none"},
        },
    }


def test_an_expired_oauth_token_is_refreshed_once_and_written_back(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    session_id = _session(sdk, mcp.url, _expired_oauth(mcp))
    before = mcp.refreshes
    words = f"refresh-{uuid.uuid4().hex[:8]}"
    events = _say(sdk, session_id, words)
    assert _one(events, "agent.mcp_tool_result")["content"][0]["text"] == words
    assert mcp.refreshes == before + 1
    assert not [e for e in events if e["type"] == "session.error"]
    vault_id = sdk.beta.sessions.retrieve(session_id).vault_ids[0]
    (credential,) = sdk.beta.vaults.credentials.list(vault_id).data
    assert credential.auth.expires_at is not None  # type: ignore[union-attr]
    # The next turn uses the written-back token: no second refresh.
    _say(sdk, session_id, "again")
    assert mcp.refreshes == before + 1


def test_a_token_about_to_expire_is_used_while_its_refresh_fails(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    """Refreshed a minute ahead of its expiry; the token endpoint refuses (the
    refresh token is not its), but the token still works for that minute. Before,
    the server was unusable from the refresh's failure on."""
    soon = (datetime.now(UTC) + timedelta(seconds=40)).isoformat()
    auth = {
        "type": "mcp_oauth",
        "mcp_server_url": mcp.url,
        "access_token": mcp.issue_token(),
        "expires_at": soon,
        "refresh": {
            "client_id": mcp.client.client_id,
            "refresh_token": "not-one-the-server-issued",
            "token_endpoint": mcp.token_url,
            "token_endpoint_auth": {"type": "none"},
        },
    }
    session_id = _session(sdk, mcp.url, auth)
    words = f"ahead-{uuid.uuid4().hex[:8]}"
    events = _say(sdk, session_id, words)
    assert _one(events, "agent.mcp_tool_result")["content"][0]["text"] == words
    assert not [e for e in events if e["type"] == "session.error"]


def test_a_server_without_a_credential_fails_authentication_and_the_turn_goes_on(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    session_id = _session(sdk, mcp.url, None)
    events = _say(sdk, session_id, "no-token")
    error = _one(events, "session.error")["error"]
    assert error["type"] == "mcp_authentication_failed_error"
    assert error["mcp_server_name"] == "tools" and error["retry_status"]["type"] == "retrying"
    answer = [e for e in events if e["type"] == "agent.message"][-1]
    assert answer["content"][0]["text"] == "offered: "
    assert events[-1]["stop_reason"]["type"] == "end_turn"


def test_an_unreachable_server_fails_to_connect(sdk: anthropic.Anthropic) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp/"
    session_id = _session(sdk, url, None)
    events = _say(sdk, session_id, "nobody-home")
    error = _one(events, "session.error")["error"]
    assert (error["type"], error["mcp_server_name"]) == ("mcp_connection_failed_error", "tools")
    assert events[-1]["stop_reason"]["type"] == "end_turn"


def test_a_loopback_address_is_refused_by_the_egress_rules(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer
) -> None:
    """The agent names the server by its address, which nobody pinned: the
    brain holds its MCP traffic to the sandbox's address blocklist."""
    session_id = _session(sdk, mcp.loopback_url, _bearer(mcp, mcp.issue_token()))
    events = _say(sdk, session_id, "loopback")
    error = _one(events, "session.error")["error"]
    assert error["type"] == "mcp_connection_failed_error"
    assert "egress rules refuse 127.0.0.1" in error["message"]
    assert not any(c[1].get("text") == "loopback" for c in mcp.tool_calls)


@pytest.mark.parametrize("allow", [False, True])
def test_a_limited_environment_lets_mcp_servers_through_only_when_it_says_so(
    sdk: anthropic.Anthropic, mcp: FakeMcpServer, allow: bool
) -> None:
    networking = {
        "type": "limited",
        "allowed_hosts": ["example.com"],
        "allow_mcp_servers": allow,
        "allow_package_managers": False,
    }
    token = mcp.issue_token()
    session_id = _session(sdk, mcp.url, _bearer(mcp, token), networking=networking)
    words = f"limited-{allow}-{uuid.uuid4().hex[:6]}"
    events = _say(sdk, session_id, words)
    if allow:
        assert _one(events, "agent.mcp_tool_result")["content"][0]["text"] == words
    else:
        error = _one(events, "session.error")["error"]
        assert error["type"] == "mcp_connection_failed_error"
        assert "not in the environment's allowed_hosts" in error["message"]
        assert ("echo", {"text": words}) not in mcp.tool_calls


@pytest.mark.parametrize("point", ["mcp.after_call:1", "model.before_request:2"])
def test_a_call_that_reached_the_server_is_never_made_again_after_a_sigkill(
    tmp_path: Path, fake: FakeModel, mcp: FakeMcpServer, forker: ServeForker, point: str
) -> None:
    """Killed after the call returned (not yet recorded: the model is told it
    may have run) and after it was recorded (its result is reused)."""
    data = tmp_path / "data"
    env = loop_env(fake, STEAD_LEASE_SECONDS="30")
    doomed = ServerProcess(data, env={**env, "STEAD_FAILPOINTS": point}, forker=forker).start()
    key = doomed.first_key
    assert key
    words = f"crash-{uuid.uuid4().hex[:8]}"
    with sdk_of(doomed) as client:
        session_id = _session(client, mcp.url, _bearer(mcp, mcp.issue_token()))
        message = {"type": "user.message", "content": [{"type": "text", "text": words}]}
        with contextlib.suppress(anthropic.APIConnectionError):  # it may die before answering
            client.beta.sessions.events.send(session_id, events=[message])  # type: ignore[list-item]
    assert doomed.wait_exit(timeout=30)
    doomed.kill()
    survivor = ServerProcess(data, env=env, forker=forker)
    survivor.first_key = key
    survivor.start()
    try:
        with sdk_of(survivor) as client:
            wait_idle(client, session_id)
            events = _events(client, session_id)
    finally:
        survivor.stop()
    assert mcp.tool_calls.count(("echo", {"text": words})) == 1
    result = _one(events, "agent.mcp_tool_result")
    if point.startswith("mcp."):
        assert result["is_error"] and "may have run" in result["content"][0]["text"]
    else:
        assert result["content"] == [{"type": "text", "text": words}]
    assert events[-1]["stop_reason"]["type"] == "end_turn"


QUICK_SECONDS = 2
"""``STEAD_MCP_TIMEOUT_SECONDS`` of the ``quick`` server: tests of what waits
for an MCP server or a token endpoint."""


@pytest.fixture(scope="module")
def quick(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    env = loop_env(fake, STEAD_MCP_TIMEOUT_SECONDS=str(QUICK_SECONDS))
    yield from serving(tmp_path_factory.mktemp("mcp-quick"), env, forker)


@pytest.fixture
def quick_sdk(quick: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(quick) as client:
        yield client


def test_a_token_endpoint_that_never_finishes_answering_fails_the_refresh_in_time(
    quick_sdk: anthropic.Anthropic,
) -> None:
    """It sends a byte every half second: no read waits long, but the whole
    refresh must still end within the MCP timeout, not hold the turn."""
    stalled = FakeMcpServer().start()
    try:
        stalled.stall_token_endpoint = True
        session_id = _session(quick_sdk, stalled.url, _expired_oauth(stalled))
        quick_sdk.beta.sessions.events.send(
            session_id,
            events=[{"type": "user.message", "content": [{"type": "text", "text": "stall"}]}],
        )
        wait_idle(quick_sdk, session_id, timeout=6 * QUICK_SECONDS + 5)
        events = _events(quick_sdk, session_id)
    finally:
        stalled.stop()
    error = _one(events, "session.error")["error"]
    assert error["type"] == "mcp_authentication_failed_error"
    assert f"did not answer within {QUICK_SECONDS}s" in error["message"]
    assert events[-1]["stop_reason"]["type"] == "end_turn"


def test_a_call_that_timed_out_after_it_was_sent_is_reported_as_one_that_may_have_run(
    quick_sdk: anthropic.Anthropic,
) -> None:
    slow = FakeMcpServer().start()
    try:
        slow.echo_delay = QUICK_SECONDS + 2
        session_id = _session(quick_sdk, slow.url, _bearer(slow, slow.issue_token()))
        words = f"slow-{uuid.uuid4().hex[:8]}"
        events = _say(quick_sdk, session_id, words)
    finally:
        slow.stop()
    assert ("echo", {"text": words}) in slow.tool_calls
    result = _one(events, "agent.mcp_tool_result")
    text = result["content"][0]["text"]
    assert result["is_error"] and f"no answer within {QUICK_SECONDS}s" in text
    assert "may have reached the server and run" in text


def _mcp_calls(served: ServerProcess) -> dict[str, float]:
    """``stead_tool_calls_total{kind="mcp"}`` by outcome, from ``/metrics``."""
    answer = httpx2.get(
        f"{served.url}/metrics",
        headers={"x-api-key": served.first_key or ""},
        timeout=30,
        verify=client_tls(),
    )
    assert answer.status_code == 200, answer.text
    return {
        sample.labels["outcome"]: sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
        if sample.name == "stead_tool_calls_total" and sample.labels["kind"] == "mcp"
    }


def test_a_call_to_a_server_that_went_away_is_counted_unavailable(
    sdk: anthropic.Anthropic, served: ServerProcess
) -> None:
    """The server listed its tools, then stopped while the call waited for its
    confirmation. Before, counted as the tool's own error, where a sandbox that
    does not answer is counted unavailable."""
    gone = FakeMcpServer().start()
    try:
        session_id = _session(sdk, gone.url, _bearer(gone, gone.issue_token()), policy=None)
        use = _one(_say(sdk, session_id, f"gone-{uuid.uuid4().hex[:8]}"), "agent.mcp_tool_use")
    finally:
        gone.stop()
    before = _mcp_calls(served)
    confirm = {"type": "user.tool_confirmation", "tool_use_id": use["id"], "result": "allow"}
    sdk.beta.sessions.events.send(session_id, events=[confirm])  # type: ignore[list-item]
    wait_idle(sdk, session_id)
    result = _one(_events(sdk, session_id), "agent.mcp_tool_result")
    assert result["is_error"] and "ConnectError" in result["content"][0]["text"]
    after = _mcp_calls(served)
    assert after.get("unavailable", 0) - before.get("unavailable", 0) == 1
    assert after.get("error", 0) == before.get("error", 0)
