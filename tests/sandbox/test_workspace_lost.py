"""A session whose saved workspace cannot be restored (rule 6), seen through
the official SDK: the tool call fails, the session ends with a terminal
``session.error`` naming the cause and ``session.status_terminated``, refuses
events after, its sandbox lease ends, and the agent never gets an empty
workspace in its place."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess, Text, ToolCall, Turn
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


def idle_events(client: Any, session_id: str, count: int, end: str = "idle") -> list[Any]:
    """The session's events once ``count`` turns have gone idle, or it ended."""
    deadline = time.monotonic() + WAIT * 2
    while True:
        events = list(client.beta.sessions.events.list(session_id, limit=1000))
        if end == "terminated" and events and events[-1].type == "session.status_terminated":
            return events
        if sum(1 for e in events if e.type == "session.status_idle") >= count:
            return events
        assert time.monotonic() < deadline, [e.type for e in events]
        time.sleep(0.1)


def released(client: Any, session_id: str) -> Any:
    """The session's sandbox lease once the sweeper ended it and destroyed the
    sandbox (bounded wait)."""
    deadline = time.monotonic() + WAIT
    while True:
        view: Any = client.get(f"/v1/sessions/{session_id}/sandbox", cast_to=object)
        if view["lease"]["status"] == "destroyed":
            return view["lease"]
        assert time.monotonic() < deadline, view
        time.sleep(0.05)


def test_a_lost_workspace_ends_the_session(
    host: HostProcess, tmp_path: Path, forker: ServeForker
) -> None:
    with FakeModel(script) as fake:
        env = loop_env(fake, STEAD_SANDBOX_SWEEP_INTERVAL_SECONDS="0.2", **host.settings_env)
        server = ServerProcess(tmp_path / "data", env=env, forker=forker)
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
                (snapshot,) = [p for p in blobs.iterdir() if p.is_file()]
                snapshot.write_bytes(b"not a snapshot")

                client.beta.sessions.events.send(session_id, events=[message("read it")])
                events = idle_events(client, session_id, 2, end="terminated")
                assert client.beta.sessions.retrieve(session_id).status == "terminated"
                with pytest.raises(anthropic.ConflictError):
                    client.beta.sessions.events.send(session_id, events=[message("again")])
                lease = released(client, session_id)
                status = host.call({"op": "status", "sandbox_id": session_id})
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
    assert error.error.retry_status.type == "terminal"
    assert [e.type for e in second_turn[-2:]] == ["session.usage", "session.status_terminated"]
    assert lease["expiry_reason"] == "session_terminated"
    assert status.get("error") == "SandboxNotFound", status
