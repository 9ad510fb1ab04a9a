"""An MCP OAuth refresh cut off by a SIGKILL of ``stead serve`` between the token
endpoint's answer and its write-back, through the official SDK, with the fake
model and a real MCP server whose token endpoint rotates refresh tokens (each
is taken once) on loopback."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, ToolCall, Turn
from stead.testing.mcp_server import FakeMcpServer
from stead.testing.scripts import echo
from tests.conftest import loop_env, sdk_of
from tests.integration.helpers import message, wait_idle

Json = dict[str, Any]
ECHO = "mcp__tools__echo"


def script(body: Json) -> Turn:
    """Calls ``echo`` when it is offered and the user has just spoken; then (or
    without it) repeats the user's words."""
    offered = {t["name"] for t in body.get("tools", [])}
    last = body["messages"][-1]["content"]
    answered = any(b.get("type") == "tool_result" for b in last if isinstance(b, dict))
    if ECHO in offered and not answered:
        return Turn([ToolCall(ECHO, {"text": "echoed"})])
    return echo(body)


@pytest.fixture(scope="module")
def mcp() -> Iterator[FakeMcpServer]:
    server = FakeMcpServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(script) as model:
        yield model


def _session(sdk: anthropic.Anthropic, mcp: FakeMcpServer) -> tuple[str, str, str]:
    """(session id, vault id, credential id): an agent with the MCP server's
    tools, and a credential whose access token the server has revoked."""
    expired = mcp.issue_token()
    mcp.revoke(expired)
    auth = {
        "type": "mcp_oauth",
        "mcp_server_url": mcp.url,
        "access_token": expired,
        "refresh": {
            "client_id": mcp.client.client_id,
            "refresh_token": mcp.issue_refresh_token(),
            "token_endpoint": mcp.token_url,
            "token_endpoint_auth": {"type": "none"},
        },
    }
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "tools",
        "default_config": {"permission_policy": {"type": "always_allow"}},
    }
    agent = sdk.beta.agents.create(
        name="mcp",
        model="claude-sonnet-4-6",
        mcp_servers=[{"type": "url", "name": "tools", "url": mcp.url}],
        tools=[toolset],  # type: ignore[list-item]
    )
    env = sdk.beta.environments.create(name=f"mcp-{uuid.uuid4().hex[:8]}")
    vault = sdk.beta.vaults.create(display_name="mcp")
    credential = sdk.beta.vaults.credentials.create(vault.id, auth=auth)  # type: ignore[arg-type]
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, vault_ids=[vault.id])
    return session.id, vault.id, credential.id


def _turn(sdk: anthropic.Anthropic, session_id: str, text: str) -> list[Any]:
    """The events of the turn ``text`` starts, once it has ended."""
    before = len(list(sdk.beta.sessions.events.list(session_id)))
    sdk.beta.sessions.events.send(session_id, events=[message(text)])  # type: ignore[list-item]
    wait_idle(sdk, session_id)
    return list(sdk.beta.sessions.events.list(session_id))[before:]


def test_a_refresh_whose_answer_a_sigkill_lost_asks_for_re_authorisation(
    tmp_path: Path, fake: FakeModel, mcp: FakeMcpServer, forker: ServeForker
) -> None:
    """The endpoint rotated the refresh token and the server died before storing
    the answer: the stored refresh token may be spent, so the server after it
    does not present it again (an endpoint that detects a rotated token's reuse
    revokes its whole grant) but says the credential needs re-authorising; once
    updated with a new refresh token, it is refreshed and the tools are used.
    Before, the spent token was presented and refused (HTTP 400) at every turn."""
    data = tmp_path / "data"
    env = loop_env(fake, STEAD_LEASE_SECONDS="30")
    doomed = ServerProcess(
        data, env={**env, "STEAD_FAILPOINTS": "mcp.after_refresh:1"}, forker=forker
    ).start()
    key = doomed.first_key
    assert key
    refreshes = mcp.refreshes
    with sdk_of(doomed) as client:
        session_id, vault_id, credential_id = _session(client, mcp)
        with contextlib.suppress(anthropic.APIConnectionError):  # it may die before answering
            client.beta.sessions.events.send(session_id, events=[message("first")])  # type: ignore[list-item]
    assert doomed.wait_exit(timeout=30)
    doomed.kill()
    assert mcp.refreshes == refreshes + 1  # rotated: the stored refresh token is spent
    given = len(mcp.refresh_tokens_given)
    survivor = ServerProcess(data, env=env, forker=forker)
    survivor.first_key = key
    survivor.start()
    try:
        with sdk_of(survivor) as client:
            wait_idle(client, session_id)
            recovered = list(client.beta.sessions.events.list(session_id))
            again = _turn(client, session_id, "second")
            checked = client.beta.vaults.credentials.mcp_oauth_validate(
                credential_id, vault_id=vault_id
            )
            assert (checked.status, checked.refresh) == ("invalid", None)
            assert len(mcp.refresh_tokens_given) == given  # never presented again
            new = mcp.issue_refresh_token()
            client.beta.vaults.credentials.update(
                credential_id,
                vault_id=vault_id,
                auth={"type": "mcp_oauth", "refresh": {"refresh_token": new}},  # type: ignore[typeddict-item]
            )
            mended = _turn(client, session_id, "third")
    finally:
        survivor.stop()
    for turn in (recovered, again):
        [error] = [e.error for e in turn if e.type == "session.error"]
        assert error.type == "mcp_authentication_failed_error"
        assert "needs re-authorising" in error.message
        assert not [e for e in turn if e.type == "agent.mcp_tool_use"]
        assert turn[-1].stop_reason.type == "end_turn"
    assert mcp.refresh_tokens_given[given:] == [new]
    assert not [e for e in mended if e.type == "session.error"]
    [result] = [e for e in mended if e.type == "agent.mcp_tool_result"]
    assert not result.is_error
