"""A session resource added through one process while another runs the
session's turn: two ``stead serve`` processes on one PostgreSQL and one
sandbox host. The resource takes effect at the turn's next tool call, as it
does when added through the process that runs the turn."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from stead.testing import (
    Delay,
    FakeModel,
    FaultRule,
    HostProcess,
    ServeForker,
    Text,
    ToolCall,
    Turn,
)
from stead.testing.scripts import assistant_turns
from tests.conftest import make_client
from tests.databases import PostgresRun
from tests.integration.brains import Brains
from tests.integration.helpers import message, new_session, wait_idle
from tests.sandbox.conftest import requires_isolation

pytestmark = [pytest.mark.postgres, requires_isolation]
LATE = "/mnt/session/uploads/late.txt"


def two_calls(body: dict[str, Any]) -> Turn:
    """A turn of two bash calls, the second reading the file added in between."""
    calls = assistant_turns(body)
    if calls == 0:
        return Turn([ToolCall("bash", {"command": "echo first"})])
    if calls == 1:
        return Turn([ToolCall("bash", {"command": f"cat {LATE} 2>&1"})])
    return Turn([Text("done")])


def _second_call(request: Any) -> bool:
    return assistant_turns(request.body) == 1


def test_a_file_added_through_another_process_is_there_at_the_turn_s_next_call(
    postgres_run: PostgresRun, tmp_path: Path, forker: ServeForker
) -> None:
    """Before, only the process the resource was added through staged the
    sandbox again: the one running the turn did so only at its next turn."""
    host = HostProcess(tmp_path / "host", forker=forker).start()
    # The answer that makes the second call waits, while the file is added.
    slow = FaultRule(Delay(3.0), times=1, when=_second_call)
    try:
        with FakeModel(two_calls, faults=[slow]) as fake:
            brains = Brains(postgres_run, tmp_path / "brains", fake, forker)
            try:
                # One blob store (the host's): a file uploaded through one
                # process is mounted by the other.
                shared = {**host.settings_env, "STEAD_BLOB_URL": host.blob_url}
                runner, other = brains.start(**shared), brains.start(**shared)
                with (
                    make_client(runner.url, brains.key) as on_runner,
                    make_client(other.url, brains.key) as on_other,
                ):
                    session_id = new_session(on_runner, [{"type": "agent_toolset_20260401"}])
                    file_id = on_other.beta.files.upload(
                        file=("late.txt", io.BytesIO(b"added late\n"), "text/plain")
                    ).id
                    on_runner.beta.sessions.events.send(session_id, events=[message("go")])
                    fake.wait_for_requests(2)  # the first call ran; its answer waits
                    on_other.beta.sessions.resources.add(
                        session_id, type="file", file_id=file_id, mount_path=LATE
                    )
                    wait_idle(on_runner, session_id, timeout=30)
                    log = list(on_runner.beta.sessions.events.list(session_id, limit=1000))
            finally:
                brains.close()
    finally:
        host.stop()
    results = [e.content[0].text for e in log if e.type == "agent.tool_result"]  # type: ignore[union-attr]
    assert results == ["first", "added late"]
