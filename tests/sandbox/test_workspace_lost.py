"""A session whose saved workspace cannot be restored (rule 6), seen through
the official SDK: the tool call fails, the turn ends with a ``session.error``
naming the cause, and the agent never gets an empty workspace in its place."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from stead.testing import FakeModel, HostProcess, ServerProcess, Text, ToolCall, Turn
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env, make_client
from tests.integration.helpers import message
from tests.sandbox.conftest import WAIT, requires_isolation, tool_session

pytestmark = requires_isolation


def script(body: dict[str, Any]) -> Turn:
    turns = assistant_turns(body)
    if turns == 0:
        return Turn([ToolCall("bash", {"command": "echo precious > kept"})])
    if turns == 2:
        return Turn(
            [
                ToolCall("bash", {"command": "cat kept"}),
                ToolCall("bash", {"command": "touch never-run"}),
            ]
        )
    return Turn([Text("done")])


def idle_events(client: Any, session_id: str, count: int) -> list[Any]:
    """The session's events once ``count`` turns have gone idle."""
    deadline = time.monotonic() + WAIT * 2
    while True:
        events = list(client.beta.sessions.events.list(session_id, limit=1000))
        if sum(1 for e in events if e.type == "session.status_idle") >= count:
            return events
        assert time.monotonic() < deadline, [e.type for e in events]
        time.sleep(0.1)


def test_a_lost_workspace_ends_the_turn_with_a_session_error(
    host: HostProcess, tmp_path: Path
) -> None:
    with FakeModel(script) as fake:
        server = ServerProcess(tmp_path / "data", env=loop_env(fake, **host.settings_env))
        server.start()
        try:
            assert server.first_key, server.log_text()
            with make_client(server.url, server.first_key) as client:
                session_id = tool_session(client, "lost")
                client.beta.sessions.events.send(session_id, events=[message("write it")])
                idle_events(client, session_id, 1)

                slept = host.call({"op": "sleep", "sandbox_id": session_id, "force": True})
                assert slept == {"result": {"slept": True}}, slept
                blobs = Path(host.blob_url.removeprefix("file://")) / "sandboxes" / session_id
                (snapshot,) = blobs.iterdir()
                snapshot.write_bytes(b"not a snapshot")

                client.beta.sessions.events.send(session_id, events=[message("read it")])
                events = idle_events(client, session_id, 2)
        finally:
            server.stop()
    asked = [i for i, e in enumerate(events) if e.type == "user.message"]
    second_turn = events[asked[1] :]
    results = [e for e in second_turn if e.type == "agent.tool_result"]
    assert [r.is_error for r in results] == [True, True]
    assert "cannot be restored" in results[0].content[0].text
    assert results[1].content[0].text.startswith("not run:")
    (error,) = [e for e in second_turn if e.type == "session.error"]
    assert "cannot be restored" in error.error.message
    assert error.error.retry_status.type == "exhausted"
    assert second_turn[-1].stop_reason.type == "retries_exhausted"
    status = host.call({"op": "status", "sandbox_id": session_id})
    assert "corrupt" in status["result"]["last_error"]
