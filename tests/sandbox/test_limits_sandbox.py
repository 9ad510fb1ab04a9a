"""Sandbox limits on a real sandbox host: concurrent sandboxes per workspace,
sandbox time per month and per session of an environment, each checked when a
tool call acquires its sandbox's lease, and reported to the model by name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

from stead.testing import (
    FakeModel,
    HostProcess,
    ServeForker,
    ServerProcess,
    Text,
    ToolCall,
    Turn,
    assistant_turns,
)
from tests.conftest import loop_env, make_client
from tests.integration.helpers import message, wait_idle
from tests.sandbox.conftest import requires_isolation, shell, tool_session

pytestmark = requires_isolation


def script(body: dict[str, Any]) -> Turn:
    """``shell``, and a session opened with ``repeat N: <command>`` runs the
    command N times, one call after another, in its first turn."""
    first = body["messages"][0]["content"]
    opening = first if isinstance(first, str) else "".join(b.get("text", "") for b in first)
    if not opening.startswith("repeat "):
        return shell(body)
    times, command = opening.removeprefix("repeat ").split(": ", 1)
    made = assistant_turns(body)
    if made < int(times):
        return Turn([ToolCall("bash", {"command": command})])
    return Turn([Text("done")])


@pytest.fixture(scope="module")
def served(
    host: HostProcess, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    with FakeModel(script) as fake:
        env = loop_env(fake, **host.settings_env)
        server = ServerProcess(
            tmp_path_factory.mktemp("limits") / "data", env=env, forker=forker
        ).start()
        yield server
        server.stop()


@pytest.fixture
def tenant(served: ServerProcess) -> Iterator[tuple[anthropic.Anthropic, str]]:
    """The SDK with a key of a new workspace, and the workspace's id."""
    key = served.create_key(new_workspace="tenant")
    with make_client(served.url, key) as sdk:
        own = sdk.get("/v1/stead/limits", cast_to=httpx2.Response).json()
        yield sdk, own["workspace_id"]


def run(sdk: anthropic.Anthropic, session_id: str, command: str) -> Any:
    """The result of running ``command`` through the model's bash call."""
    sdk.beta.sessions.events.send(session_id, events=[message(f"$ {command}")])
    wait_idle(sdk, session_id)
    events = list(sdk.beta.sessions.events.list(session_id))
    return next(e for e in reversed(events) if e.type == "agent.tool_result")


def text(result: Any) -> str:
    return "".join(block.text for block in result.content)


def limit(admin: httpx2.Client, path: str, **values: Any) -> None:
    answer = admin.post(f"/v1/stead/workspaces/{path}/limits", json=values)
    assert answer.status_code == 200, answer.text


def test_a_second_sandbox_waits_for_the_concurrency_limit(
    admin: httpx2.Client, tenant: tuple[anthropic.Anthropic, str]
) -> None:
    sdk, workspace_id = tenant
    limit(admin, workspace_id, concurrent_sandboxes=1)
    first, second = tool_session(sdk), tool_session(sdk)
    ran = run(sdk, first, "echo first")
    assert not ran.is_error and text(ran).strip() == "first"
    refused = run(sdk, second, "echo second")
    assert refused.is_error and "limit of 1 concurrent sandboxes" in text(refused)
    again = run(sdk, first, "echo still")  # the sandbox that holds its lease keeps it
    assert not again.is_error and text(again).strip() == "still"
    limit(admin, workspace_id, concurrent_sandboxes=2)
    ran = run(sdk, second, "echo second")
    assert not ran.is_error and text(ran).strip() == "second"


def test_sandbox_time_limits_refuse_the_sandbox_by_name(
    admin: httpx2.Client, tenant: tuple[anthropic.Anthropic, str]
) -> None:
    sdk, workspace_id = tenant
    session_id = tool_session(sdk)
    environment_id = sdk.beta.sessions.retrieve(session_id).environment_id
    per_session = f"{workspace_id}/environments/{environment_id}"
    limit(admin, per_session, session_sandbox_seconds=0)
    refused = run(sdk, session_id, "echo hi")
    assert refused.is_error and "sandbox time limit per session" in text(refused)
    limit(admin, per_session, session_sandbox_seconds=None)
    limit(admin, workspace_id, monthly_sandbox_seconds=0)
    refused = run(sdk, session_id, "echo hi")
    assert refused.is_error and "monthly sandbox time limit" in text(refused)
    limit(admin, workspace_id, monthly_sandbox_seconds=None)
    ran = run(sdk, session_id, "echo hi")
    assert not ran.is_error and text(ran).strip() == "hi"


def test_a_session_s_sandbox_time_is_checked_at_each_call_of_a_turn(
    admin: httpx2.Client, tenant: tuple[anthropic.Anthropic, str]
) -> None:
    """Each call books the sandbox's time with its result: a turn of many calls
    meets the limit at the call after it, not at the next turn."""
    sdk, workspace_id = tenant
    session_id = tool_session(sdk)
    environment_id = sdk.beta.sessions.retrieve(session_id).environment_id
    limit(admin, f"{workspace_id}/environments/{environment_id}", session_sandbox_seconds=1)
    sdk.beta.sessions.events.send(session_id, events=[message("repeat 3: sleep 1.2")])
    wait_idle(sdk, session_id)
    results = [
        e for e in sdk.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"
    ]
    assert [r.is_error for r in results] == [False, True, True]
    assert all("sandbox time limit per session" in text(r) for r in results[1:])
