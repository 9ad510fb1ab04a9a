"""stead's own limits per workspace, set by an operator (admin routes and
``stead limits``) and enforced before each model request, through the official
SDK against a real ``stead serve`` whose fake model reports known usage
(``test_usage_budget``: a turn's two requests use 130,000 then 72,000 tokens
and cost 52.5 then 18.6 cents)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls
from tests.conftest import loop_env, make_client
from tests.integration.helpers import message
from tests.integration.test_usage_budget import new_session, script, wait_for_stop


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    with FakeModel(script) as fake:
        process = ServerProcess(
            tmp_path_factory.mktemp("limits"), env=loop_env(fake), forker=forker
        ).start()
        yield process
        process.stop()


def workspace_of(http: httpx2.Client) -> str:
    return str(http.get("/v1/stead/limits").json()["workspace_id"])


def tenant(served: ServerProcess) -> tuple[anthropic.Anthropic, httpx2.Client]:
    """The SDK and a plain client with a member key of a new workspace."""
    key = served.create_key(new_workspace="tenant")
    http = httpx2.Client(
        verify=client_tls(), base_url=served.url, headers={"x-api-key": key}, timeout=30
    )
    return make_client(served.url, key), http


def set_limits(admin: httpx2.Client, workspace_id: str, **limits: Any) -> dict[str, Any]:
    answer = admin.post(f"/v1/stead/workspaces/{workspace_id}/limits", json=limits)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def idles(sdk: anthropic.Anthropic, session_id: str, count: int) -> list[Any]:
    """The log once it holds ``count`` idles (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        events = list(sdk.beta.sessions.events.list(session_id))
        if len([e for e in events if e.type == "session.status_idle"]) >= count:
            return events
        assert time.monotonic() < deadline, [e.type for e in events]
        time.sleep(0.02)


def last_error(events: list[Any]) -> Any:
    return next(e for e in reversed(events) if e.type == "session.error").error


def test_a_token_limit_stops_the_next_turn_and_raising_it_resumes(
    served: ServerProcess, admin: httpx2.Client
) -> None:
    sdk, http = tenant(served)
    with sdk, http:
        workspace_id = workspace_of(http)
        shown = set_limits(admin, workspace_id, monthly_tokens=150_000)
        assert shown["limits"]["monthly_tokens"] == 150_000
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[message("first")])
        wait_for_stop(sdk, session_id, "end_turn")  # 0, then 130,000 < 150,000: both asked
        sdk.beta.sessions.events.send(session_id, events=[message("second")])
        events = wait_for_stop(sdk, session_id, "retries_exhausted")
        error = last_error(events)
        assert error.type == "billing_error" and error.retry_status.type == "exhausted"
        assert "monthly token limit" in error.message and "202,000 of 150,000" in error.message
        requests = [e for e in events if e.type == "span.model_request_start"]
        assert len(requests) == 2  # the second turn asked nothing
        own = http.get("/v1/stead/limits").json()
        assert own["this_month"]["tokens"] == 202_000
        assert own["this_month"]["list_cost"] == {"amount": "71", "currency": "USD"}

        set_limits(admin, workspace_id, monthly_tokens=None)
        sdk.beta.sessions.events.send(session_id, events=[message("third")])
        events = idles(sdk, session_id, 3)
        assert events[-1].stop_reason.type == "end_turn"
        assert len([e for e in events if e.type == "span.model_request_start"]) == 3


def test_a_spend_limit_stops_a_turn_before_its_next_model_request(
    served: ServerProcess, admin: httpx2.Client
) -> None:
    sdk, http = tenant(served)
    with sdk, http:
        cap = {"amount": "50", "currency": "USD"}
        shown = set_limits(admin, workspace_of(http), monthly_list_cost=cap)
        assert shown["limits"]["monthly_list_cost"] == cap
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[message("spend")])
        events = wait_for_stop(sdk, session_id, "retries_exhausted")
        # The bash call ran (its request cost 52.5 cents); the answer was never asked.
        assert [e.type for e in events if e.type.startswith("agent.tool")] == [
            "agent.tool_use",
            "agent.tool_result",
        ]
        assert len([e for e in events if e.type == "span.model_request_start"]) == 1
        assert "$0.53 of $0.50" in last_error(events).message


def test_limits_are_an_operators_to_set(served: ServerProcess, admin: httpx2.Client) -> None:
    sdk, http = tenant(served)
    with sdk, http:
        workspace_id = workspace_of(http)
        own = http.get("/v1/stead/limits")
        assert own.status_code == 200
        assert own.json()["limits"] == {
            "monthly_tokens": None,
            "monthly_list_cost": None,
            "monthly_sandbox_seconds": None,
            "concurrent_sandboxes": None,
            "file_storage_bytes": None,
        }
        refused = http.post(f"/v1/stead/workspaces/{workspace_id}/limits", json={})
        assert refused.status_code == 403
        assert "admin API key" in refused.json()["error"]["message"]
        assert http.get(f"/v1/stead/workspaces/{workspace_id}/limits").status_code == 403
        env = sdk.beta.environments.create(name="limited")
        path = f"/v1/stead/workspaces/{workspace_id}/environments/{env.id}/limits"
        assert http.post(path, json={"session_sandbox_seconds": 5}).status_code == 403
        answer = admin.post(path, json={"session_sandbox_seconds": 5})
        assert answer.status_code == 200
        assert answer.json()["limits"] == {"session_sandbox_seconds": 5}
        assert admin.get(path).json()["limits"] == {"session_sandbox_seconds": 5}


BAD = [
    ({"monthly_tokens": -1}, "monthly_tokens"),
    ({"monthly_tokens": True}, "monthly_tokens"),
    ({"monthly_tokens": 1.5}, "monthly_tokens"),
    ({"monthly_tokens": 2**60}, "monthly_tokens"),
    ({"concurrent_sandboxes": "2"}, "concurrent_sandboxes"),
    ({"monthly_list_cost": {"amount": "5", "currency": "EUR"}}, "monthly_list_cost.currency"),
    ({"monthly_list_cost": {"amount": "-5", "currency": "USD"}}, "monthly_list_cost.amount"),
    ({"monthly_list_cost": {"amount": "9" * 40, "currency": "USD"}}, "monthly_list_cost.amount"),
    ({"monthly_list_cost": {"amount": "1" * 13, "currency": "USD"}}, "monthly_list_cost.amount"),
    ({"monthly_list_cost": 5}, "monthly_list_cost"),
    ({"session_sandbox_seconds": 5}, "session_sandbox_seconds"),
    ({"max_users": 5}, "max_users"),
]


@pytest.mark.parametrize(("body", "field"), BAD, ids=[f for _, f in BAD])
def test_bad_limits_are_refused_naming_the_field(
    admin: httpx2.Client, body: dict[str, Any], field: str
) -> None:
    workspace_id = workspace_of(admin)
    before = admin.get(f"/v1/stead/workspaces/{workspace_id}/limits").json()["limits"]
    answer = admin.post(f"/v1/stead/workspaces/{workspace_id}/limits", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["message"].startswith(field)
    after = admin.get(f"/v1/stead/workspaces/{workspace_id}/limits").json()["limits"]
    assert after == before


def test_unknown_workspaces_and_environments_are_404(admin: httpx2.Client) -> None:
    workspace_id = workspace_of(admin)
    assert admin.get("/v1/stead/workspaces/wrkspc_nosuch/limits").status_code == 404
    path = f"/v1/stead/workspaces/{workspace_id}/environments/env_nosuch/limits"
    assert admin.post(path, json={"session_sandbox_seconds": 1}).status_code == 404


def limits_cli(
    forker: ServeForker, served: ServerProcess, *args: str
) -> subprocess.CompletedProcess[str]:
    command = ("limits", *args, "--data-dir", str(served.data_dir))
    return forker.complete(command, dict(os.environ), 60)


def test_the_cli_sets_shows_and_clears_limits(served: ServerProcess, forker: ServeForker) -> None:
    sdk, http = tenant(served)
    with sdk, http:
        workspace_id = workspace_of(http)
        done = limits_cli(forker, served, "set", "--workspace", workspace_id,
            "--monthly-tokens", "1000",
            "--monthly-spend", "12.5", "--concurrent-sandboxes", "2",
            "--file-storage-bytes", "4096", "--json",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["limits"] == {
            "monthly_tokens": 1000,
            "monthly_list_cost": {"amount": "1250", "currency": "USD"},
            "monthly_sandbox_seconds": None,
            "concurrent_sandboxes": 2,
            "file_storage_bytes": 4096,
        }
        assert http.get("/v1/stead/limits").json()["limits"]["monthly_tokens"] == 1000
        cleared = limits_cli(
            forker, served, "set", "--workspace", workspace_id, "--monthly-tokens", "none"
        )
        assert cleared.returncode == 0, cleared.stderr
        shown = limits_cli(forker, served, "show", "--workspace", workspace_id)
        assert "monthly_tokens" in shown.stdout and "$12.50" in shown.stdout
        assert http.get("/v1/stead/limits").json()["limits"]["monthly_tokens"] is None
        for option, value in (
            ("--monthly-spend", "lots"),
            ("--monthly-spend", "inf"),
            ("--monthly-tokens", "\u00b2"),  # a digit to str.isdigit, not to int()
        ):
            bad = limits_cli(forker, served, "set", "--workspace", workspace_id, option, value)
            assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
            assert option.removeprefix("--").split("-")[-1] in bad.stderr
        unknown = limits_cli(
            forker, served, "set-environment", "env_nosuch", "--workspace", workspace_id
        )
        assert unknown.returncode == 1 and "env_nosuch" in unknown.stderr
