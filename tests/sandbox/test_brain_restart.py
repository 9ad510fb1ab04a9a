"""The brain dies, the body lives on (rules 5 and 6): ``stead serve`` is killed
with SIGKILL while its sandbox runs a long command; the command keeps running
in the sandbox host, and the restarted brain collects its result by op key
instead of running it again. Driven through the official SDK."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess, Text, ToolCall, Turn
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env, make_client, sdk_of
from tests.integration.helpers import message, wait_idle
from tests.sandbox.conftest import WAIT, requires_isolation, tool_session, workspace_on_host

pytestmark = requires_isolation

# Waits for a file the test creates on the host while the brain is dead, so the
# command provably outlives the brain; appends to a ledger each time it runs.
COMMAND = (
    "touch started; while [ ! -e go ]; do sleep 0.05; done; "
    "echo ran >> ledger; echo finished after the restart"
)


def first_turn(call: ToolCall) -> Any:
    """A model that makes ``call`` on its first step, then says ``done``."""

    def script(body: dict[str, Any]) -> Turn:
        return Turn([call]) if assistant_turns(body) == 0 else Turn([Text("done")])

    return script


script = first_turn(ToolCall("bash", {"command": COMMAND}))


def wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_a_command_survives_the_brain_and_is_collected_not_rerun(
    host: HostProcess, tmp_path: Path, forker: ServeForker
) -> None:
    with FakeModel(script) as fake:
        env = loop_env(fake, **host.settings_env)
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        key = server.first_key
        assert key, server.log_text()
        with make_client(server.url, key) as client:
            session_id = tool_session(client, "restart")
            client.beta.sessions.events.send(session_id, events=[message("go")])
        workspace = workspace_on_host(host, session_id)
        wait_for(workspace / "started")
        server.kill()

        (workspace / "go").touch()  # the command finishes while no brain runs
        wait_for(workspace / "ledger")
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            with make_client(server.url, key) as client:
                wait_idle(client, session_id, timeout=60)
                events = list(client.beta.sessions.events.list(session_id))
        finally:
            server.stop()
    (result,) = [e for e in events if e.type == "agent.tool_result"]
    assert not result.is_error, result
    assert "finished after the restart" in result.content[0].text  # type: ignore[union-attr]
    assert (workspace / "ledger").read_text() == "ran\n"


def test_an_expired_lease_destroys_the_sandbox_and_books_its_active_time(
    host: HostProcess, tmp_path: Path, forker: ServeForker
) -> None:
    with FakeModel(first_turn(ToolCall("bash", {"command": "echo hi > note"}))) as fake:
        env = loop_env(
            fake,
            STEAD_SANDBOX_LEASE_SECONDS="1",
            STEAD_SANDBOX_SWEEP_INTERVAL_SECONDS="0.2",
            **host.settings_env,
        )
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            assert server.first_key
            with make_client(server.url, server.first_key) as client:
                session_id = tool_session(client, "lease")
                client.beta.sessions.events.send(session_id, events=[message("go")])
                wait_idle(client, session_id, timeout=60)
            database = tmp_path / "data" / "stead.db"
            deadline = time.monotonic() + WAIT
            while (booked := active_seconds(database, session_id)) is None:
                assert time.monotonic() < deadline, "the sandbox was never destroyed"
                time.sleep(0.1)
        finally:
            server.stop()
    assert booked > 0
    assert not workspace_on_host(host, session_id).exists()
    status = host.call({"op": "status", "sandbox_id": session_id})
    assert status["error"] == "SandboxNotFound"


def wait_for_event(client: anthropic.Anthropic, session_id: str, kind: str) -> None:
    deadline = time.monotonic() + WAIT
    while not any(e.type == kind for e in client.beta.sessions.events.list(session_id)):
        assert time.monotonic() < deadline, f"no {kind} in session {session_id}"
        time.sleep(0.1)


def active_seconds(database: Path, session_id: str) -> float | None:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        destroyed = db.execute(
            "SELECT destroyed_at FROM sandbox_leases WHERE sandbox_id = ?", (session_id,)
        ).fetchone()
        if destroyed is None or destroyed[0] is None:
            return None
        row = db.execute(
            "SELECT active_seconds FROM sandbox_usage WHERE sandbox_id = ?", (session_id,)
        ).fetchone()
        return float(row[0]) if row else 0.0


def test_stead_serve_starts_a_host_that_outlives_it(tmp_path: Path, forker: ServeForker) -> None:
    work = Path(tempfile.mkdtemp(prefix="stead-work-", dir="/tmp"))
    os.chmod(work, 0o711)
    with FakeModel(script) as fake:
        env = loop_env(
            fake,
            STEAD_SANDBOX="bwrap",
            STEAD_SANDBOX_HOST_AUTOSTART="true",
            STEAD_SANDBOX_WORK_DIR=str(work),
        )
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        lock = tmp_path / "data" / "sandbox-host" / "host.lock"
        host_pid = None
        try:
            assert server.first_key
            with make_client(server.url, server.first_key) as client:
                session_id = tool_session(client, "auto")
                client.beta.sessions.events.send(session_id, events=[message("go")])
                workspace = work / "sandboxes" / session_id / "disk" / "workspace"
                wait_for(workspace / "started")
                host_pid = int(lock.read_text())
                (workspace / "go").touch()
                wait_idle(client, session_id, timeout=60)
            server.kill()
            os.kill(host_pid, 0)  # still there: the host is not the server's to stop
        finally:
            server.kill()
            if host_pid is not None:
                stop_process(host_pid)
            shutil.rmtree(work, ignore_errors=True)


def stop_process(pid: int) -> None:
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


class KillableHost:
    """A sandbox host of the test's own, to kill and start again on its state."""

    def __init__(self, state: Path, forker: ServeForker) -> None:
        self._forker = forker
        self.process = HostProcess(state, forker=forker).start()

    def restart(self) -> None:
        old = self.process
        self.process = HostProcess(
            old.state_dir, work_dir=old.work_dir, forker=self._forker
        ).start()


@contextlib.contextmanager
def brain_on_a_killable_host(
    tmp_path: Path, script: Any, forker: ServeForker
) -> Iterator[tuple[anthropic.Anthropic, KillableHost]]:
    """A ``stead serve`` whose tool calls wait for a lost host with quick backoff;
    a run left to its lease would take longer than the test may."""
    host = KillableHost(tmp_path / "host" / "state", forker)
    try:
        with FakeModel(script) as fake:
            env = loop_env(
                fake,
                STEAD_RETRY_INITIAL_SECONDS="0.2",
                STEAD_RETRY_MAX_SECONDS="1",
                STEAD_UPSTREAM_RETRIES="30",
                STEAD_LEASE_SECONDS="600",
                **host.process.settings_env,
            )
            server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
            try:
                with sdk_of(server) as client:
                    yield client, host
            finally:
                server.stop()
    finally:
        host.process.stop()


def test_a_host_killed_mid_command_is_waited_for_and_the_command_reported_in_doubt(
    tmp_path: Path, forker: ServeForker
) -> None:
    """The body dies instead: the turn waits for the sandbox host to come back
    (retrying with backoff, not failing its run), then asks again under the same
    op key, and the host, which saw the command start, says it may have run."""
    long_command = first_turn(ToolCall("bash", {"command": "touch started; sleep 600"}))
    with brain_on_a_killable_host(tmp_path, long_command, forker) as (client, host):
        session_id = tool_session(client, "host-restart")
        client.beta.sessions.events.send(session_id, events=[message("go")])
        wait_for(workspace_on_host(host.process, session_id) / "started")
        host.process.kill()
        wait_for_event(client, session_id, "session.error")
        host.restart()
        wait_idle(client, session_id, timeout=60)
        events = list(client.beta.sessions.events.list(session_id))
    errors = [e for e in events if e.type == "session.error"]
    assert all(e.error.retry_status.type == "retrying" for e in errors)  # type: ignore[union-attr]
    assert "sandbox is unavailable" in errors[0].error.message  # type: ignore[union-attr]
    (result,) = [e for e in events if e.type == "agent.tool_result"]
    assert result.is_error and "may have run" in result.content[0].text  # type: ignore[union-attr]
    assert events[-1].type == "session.status_idle"
    assert events[-1].stop_reason.type == "end_turn"  # type: ignore[union-attr]


def test_a_call_made_while_the_host_is_down_waits_for_it_and_then_runs(
    tmp_path: Path, forker: ServeForker
) -> None:
    """A write surely not sent (no connection to the host could be made) is not
    'may have run': once the host is back, it runs."""
    write_note = first_turn(ToolCall("write", {"file_path": "note", "content": "written"}))
    with brain_on_a_killable_host(tmp_path, write_note, forker) as (client, host):
        session_id = tool_session(client, "host-down")
        host.process.kill()
        client.beta.sessions.events.send(session_id, events=[message("go")])
        wait_for_event(client, session_id, "session.error")
        host.restart()
        wait_idle(client, session_id, timeout=60)
        events = list(client.beta.sessions.events.list(session_id))
        note = workspace_on_host(host.process, session_id) / "note"
        assert note.read_text() == "written"
    (result,) = [e for e in events if e.type == "agent.tool_result"]
    assert not result.is_error, result
