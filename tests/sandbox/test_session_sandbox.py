"""A session's sandbox through /v1/sessions/{id}/sandbox (rule 9): its lease
and state are visible, and releasing it destroys the sandbox after a final
snapshot; the session's next tool call gets its workspace back. Deleting the
session erases its sandbox: no final snapshot, and the earlier ones go. Driven
through the official SDK against a real ``stead serve`` and sandbox host."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import anthropic
import pytest
import websockets
from websockets.sync.client import connect

from stead.testing import (
    Delay,
    FakeModel,
    FaultRule,
    HostProcess,
    ServeForker,
    ServerProcess,
)
from tests.conftest import loop_env, sdk_of
from tests.integration.helpers import message, wait_idle
from tests.sandbox.conftest import (
    WAIT,
    bash_turn,
    requires_isolation,
    shell,
    sweepless_server,
    tool_session,
    workspace_on_host,
)

pytestmark = requires_isolation

Json = dict[str, Any]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(shell) as model:
        yield model


@pytest.fixture(scope="module")
def server(
    host: HostProcess,
    fake: FakeModel,
    tmp_path_factory: pytest.TempPathFactory,
    forker: ServeForker,
) -> Iterator[ServerProcess]:
    # The sweep interval is long: only the release's own poke can make it prompt.
    data = tmp_path_factory.mktemp("sandbox-api") / "data"
    with sweepless_server(host, fake, data, forker) as started:
        yield started


@pytest.fixture
def client(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(server) as opened:
        yield opened


def sandbox_of(client: anthropic.Anthropic, session_id: str) -> Json:
    found: Json = client.get(f"/v1/sessions/{session_id}/sandbox", cast_to=object)  # type: ignore[assignment]
    return found


def test_a_released_sandbox_is_destroyed_and_comes_back_with_its_files(
    client: anthropic.Anthropic, host: HostProcess
) -> None:
    session_id = tool_session(client)
    unused = sandbox_of(client, session_id)
    assert (unused["type"], unused["lease"], unused["state"]) == ("session_sandbox", None, None)

    assert bash_turn(client, session_id, "printf kept > note; cat note") == "kept"
    held = sandbox_of(client, session_id)
    assert held["lease"]["status"] == "active"
    assert held["state"] in ("active", "cold")
    assert held["active_seconds"] > 0

    released = client.delete(f"/v1/sessions/{session_id}/sandbox", cast_to=object)
    assert released["lease"]["expiry_reason"] == "explicit"  # type: ignore[index]
    deadline = time.monotonic() + WAIT
    while (view := sandbox_of(client, session_id))["lease"]["status"] != "destroyed":
        assert time.monotonic() < deadline, f"never destroyed: {view}"
        time.sleep(0.1)
    assert view["state"] is None and view["active_seconds"] > 0
    assert not workspace_on_host(host, session_id).exists()

    assert bash_turn(client, session_id, "cat note") == "kept"  # from the final snapshot
    again = sandbox_of(client, session_id)
    assert again["lease"]["status"] == "active"
    assert again["lease"]["created_at"] > view["lease"]["created_at"]


def saved_of(host: HostProcess, sandbox_id: str) -> list[str]:
    """The blobs the host keeps of the sandbox: snapshots and their manifests."""
    kept = Path(host.blob_url.removeprefix("file://")) / "sandboxes" / sandbox_id
    # os.walk passes over a directory the host removes while it is read (an
    # erase under way); rglob raised FileNotFoundError for one.
    return sorted(
        str((Path(top) / name).relative_to(kept))
        for top, _, names in os.walk(kept)
        for name in names
    )


def erased(host: HostProcess, sandbox_id: str) -> bool:
    """Nothing of it kept but the erase's (empty) marker."""
    on_disk = workspace_on_host(host, sandbox_id).parent
    return saved_of(host, sandbox_id) == ["erased"] and not on_disk.exists()


def wait_for(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.1)


def test_deleting_the_session_erases_its_sandbox_and_every_snapshot(
    client: anthropic.Anthropic, host: HostProcess
) -> None:
    # One sandbox destroyed before (its final snapshot kept), one still leased.
    released, leased = tool_session(client), tool_session(client)
    for session_id in (released, leased):
        assert bash_turn(client, session_id, "printf private > note; cat note") == "private"
    client.delete(f"/v1/sessions/{released}/sandbox", cast_to=object)
    wait_for(lambda: sandbox_of(client, released)["lease"]["status"] == "destroyed", "destroyed")
    assert any(name.endswith(".tar.zst") for name in saved_of(host, released))
    assert workspace_on_host(host, leased).exists()

    for session_id in (released, leased):
        assert client.beta.sessions.delete(session_id).type == "session_deleted"
    for session_id in (released, leased):
        wait_for(partial(erased, host, session_id), f"erased: {session_id}")


def test_archiving_the_session_destroys_its_sandbox_for_good(
    client: anthropic.Anthropic, server: ServerProcess, host: HostProcess
) -> None:
    """An archived session takes no more turns nor terminals: its lease ends with
    the archive (whose poke makes the sweeper destroy the sandbox at once) and a
    terminal asked for after is refused, not given a sandbox made anew."""
    session_id = tool_session(client)
    assert bash_turn(client, session_id, "printf kept > note; cat note") == "kept"
    client.beta.sessions.archive(session_id)
    wait_for(lambda: sandbox_of(client, session_id)["lease"]["status"] == "destroyed", "destroyed")
    assert sandbox_of(client, session_id)["lease"]["expiry_reason"] == "session_archived"
    assert not workspace_on_host(host, session_id).exists()

    assert server.first_key
    url = server.url.replace("http", "ws", 1) + f"/v1/sessions/{session_id}/sandbox/pty"
    headers = {"x-api-key": server.first_key}
    with (
        connect(url, additional_headers=headers) as socket,
        pytest.raises(websockets.ConnectionClosed),
    ):
        socket.recv(timeout=WAIT)
    assert socket.close_code == 4503, socket.close_reason
    assert sandbox_of(client, session_id)["lease"]["status"] == "destroyed"
    assert not workspace_on_host(host, session_id).exists()


def test_a_running_session_keeps_its_sandbox(client: anthropic.Anthropic, fake: FakeModel) -> None:
    session_id = tool_session(client)
    fake.add_fault(FaultRule(Delay(3.0)))
    client.beta.sessions.events.send(session_id, events=[message("hello")])
    with pytest.raises(anthropic.ConflictError, match="running"):
        client.delete(f"/v1/sessions/{session_id}/sandbox", cast_to=object)
    wait_idle(client, session_id, timeout=60)
    idle = client.delete(f"/v1/sessions/{session_id}/sandbox", cast_to=object)
    assert idle["lease"] is None  # type: ignore[index]  # nothing was ever leased


def test_web_tools_take_no_sandbox_nor_lease(
    client: anthropic.Anthropic, host: HostProcess
) -> None:
    """web_search runs in the brain (here it only says it is not configured):
    the session gets no lease and the host no sandbox."""
    session_id = tool_session(client)
    client.beta.sessions.events.send(session_id, events=[message("web_search stead")])
    wait_idle(client, session_id, timeout=60)
    (result,) = [
        e for e in client.beta.sessions.events.list(session_id) if e.type == "agent.tool_result"
    ]
    assert "web_search is not configured" in result.content[0].text  # type: ignore[union-attr]
    view = sandbox_of(client, session_id)
    assert (view["lease"], view["state"]) == (None, None)
    assert not workspace_on_host(host, session_id).exists()


def test_another_workspaces_session_is_not_found(
    client: anthropic.Anthropic, server: ServerProcess
) -> None:
    with pytest.raises(anthropic.NotFoundError):
        sandbox_of(client, "sesn_missing")
    with pytest.raises(anthropic.NotFoundError):
        client.delete("/v1/sessions/sesn_missing/sandbox", cast_to=object)


def test_a_call_after_the_lease_ended_is_refused_and_the_turn_goes_on(
    client: anthropic.Anthropic,
) -> None:
    session_id = tool_session(client)
    assert bash_turn(client, session_id, "echo first") == "first"
    environment_id = client.beta.sessions.retrieve(session_id).environment_id
    client.beta.environments.archive(environment_id)
    # The lease is renewed in the commit that records the call as started; an
    # archived environment ended it, so the call never reaches the sandbox.
    assert "lease ended" in bash_turn(client, session_id, "echo second")
    events = client.beta.sessions.events.list(session_id)
    assert [e.type for e in events][-1] == "session.status_idle"


def test_a_command_that_outlives_the_lease_ttl_keeps_its_sandbox(
    host: HostProcess, fake: FakeModel, tmp_path: Path, forker: ServeForker
) -> None:
    """A call in progress renews its lease: a command running past the lease's
    TTL was killed when the sweeper destroyed its sandbox under it (exit 137)."""
    env = loop_env(
        fake,
        STEAD_SANDBOX_LEASE_SECONDS="1",
        STEAD_SANDBOX_SWEEP_INTERVAL_SECONDS="0.1",
        **host.settings_env,
    )
    server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
    try:
        with sdk_of(server) as client:
            session_id = tool_session(client)
            assert bash_turn(client, session_id, "sleep 2.5; echo done") == "done"
            assert sandbox_of(client, session_id)["lease"]["status"] == "active"
    finally:
        server.stop()
