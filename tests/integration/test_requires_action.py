"""A session idle on tool calls (``requires_action``) through the official SDK,
against a real server and the fake model, on SQLite and on PostgreSQL: answers
to some of the calls it waits on, and what comes of the rest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, Text, ToolCall, Turn
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env, sdk_of, serving, store_env
from tests.databases import BACKENDS
from tests.integration.helpers import kinds, message, new_session, until_idle
from tests.integration.loop_scenarios import first_user_text

Json = dict[str, Any]
LOOKUP = {
    "type": "custom",
    "name": "lookup",
    "description": "Look something up",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}
ASKS_BEFORE_WRITING = {
    "type": "agent_toolset_20260401",
    "configs": [{"name": "write", "permission_policy": {"type": "always_ask"}}],
}
FIRST_ANSWERS = {
    "two lookups": [ToolCall("lookup", {"q": "a"}), ToolCall("lookup", {"q": "b"})],
    "lookup and write": [
        ToolCall("lookup", {"q": "a"}),
        ToolCall("write", {"file_path": "asked.txt", "content": "approved\n"}),
    ],
}
"""A session's first message -> the calls the model answers it with."""


def script(body: Json) -> Turn:
    calls = FIRST_ANSWERS.get(first_user_text(body))
    if calls is not None and assistant_turns(body) == 0:
        return Turn(list(calls))
    return Turn([Text(f"answer {assistant_turns(body)}")])


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(script) as started:
        yield started


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake: FakeModel,
    forker: ServeForker,
) -> Iterator[ServerProcess]:
    with store_env(request) as extra:
        yield from serving(tmp_path_factory.mktemp("waits"), loop_env(fake, **extra), forker)


@pytest.fixture
def sdk(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(server) as client:
        yield client


def result(use_id: str, text: str) -> Json:
    content = [{"type": "text", "text": text}]
    return {"type": "user.custom_tool_result", "custom_tool_use_id": use_id, "content": content}


def waiting_on(sdk: anthropic.Anthropic, session_id: str, stream: Any, text: str) -> list[Any]:
    """Sends ``text`` and reads ``stream`` up to the idle that waits on its
    calls; returns those calls."""
    sdk.beta.sessions.events.send(session_id, events=[message(text)])  # type: ignore[list-item]
    first = until_idle(stream)
    uses = [e for e in first if e.type in ("agent.custom_tool_use", "agent.tool_use")]
    assert first[-1].stop_reason.type == "requires_action"
    assert first[-1].stop_reason.event_ids == [u.id for u in uses]
    return uses


def test_answering_one_of_two_calls_re_emits_the_idle_with_the_other(
    sdk: anthropic.Anthropic, fake: FakeModel
) -> None:
    """Before, the answer started a run that logged running, usage and the same
    wait again, with no model request: a client read the session as running."""
    session_id = new_session(sdk, [LOOKUP])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        first, second = waiting_on(sdk, session_id, stream, "two lookups")
        asked = fake.request_count
        sdk.beta.sessions.events.send(session_id, events=[result(first.id, "A")])  # type: ignore[list-item]
        partly = until_idle(stream)
        assert kinds(partly) == ["user.custom_tool_result", "session.status_idle"]
        assert partly[-1].stop_reason.type == "requires_action"
        assert partly[-1].stop_reason.event_ids == [second.id]
        assert sdk.beta.sessions.retrieve(session_id).status == "idle"
        sdk.beta.sessions.events.send(session_id, events=[result(second.id, "B")])  # type: ignore[list-item]
        rest = until_idle(stream)
    assert kinds(rest)[:2] == ["user.custom_tool_result", "session.status_running"]
    assert rest[-1].stop_reason.type == "end_turn"
    assert fake.request_count == asked + 1
    sent = fake.requests[-1].body["messages"][-1]["content"]
    assert [b["content"][0]["text"] for b in sent if b["type"] == "tool_result"] == ["A", "B"]


def test_a_confirmation_of_one_call_waits_for_the_other_before_it_runs(
    sdk: anthropic.Anthropic, server: ServerProcess
) -> None:
    """The session goes on (the confirmed call runs) once every call it waits
    on is settled, not at each answer."""
    session_id = new_session(sdk, [LOOKUP, ASKS_BEFORE_WRITING])
    written = Path(server.data_dir) / "sandboxes" / session_id / "workspace" / "asked.txt"
    with sdk.beta.sessions.events.stream(session_id) as stream:
        lookup, write = waiting_on(sdk, session_id, stream, "lookup and write")
        allow = {"type": "user.tool_confirmation", "tool_use_id": write.id, "result": "allow"}
        sdk.beta.sessions.events.send(session_id, events=[allow])  # type: ignore[list-item]
        partly = until_idle(stream)
        assert kinds(partly) == ["user.tool_confirmation", "session.status_idle"]
        assert partly[-1].stop_reason.event_ids == [lookup.id]
        assert not written.exists()
        sdk.beta.sessions.events.send(session_id, events=[result(lookup.id, "A")])  # type: ignore[list-item]
        rest = until_idle(stream)
    ran = next(e for e in rest if e.type == "agent.tool_result")
    assert ran.tool_use_id == write.id and not ran.is_error
    assert written.read_text() == "approved\n"
    assert rest[-1].stop_reason.type == "end_turn"


def test_an_interrupt_closes_the_calls_the_session_waits_on(
    sdk: anthropic.Anthropic, fake: FakeModel
) -> None:
    """The turn a wait leaves open ends as an interrupted running turn does:
    each call gets an error result and the session goes idle with end_turn,
    with no model request. Before, the interrupt was logged and changed
    nothing: the next message found the calls still open and waited again."""
    session_id = new_session(sdk, [LOOKUP])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        first, second = waiting_on(sdk, session_id, stream, "two lookups")
        sdk.beta.sessions.events.send(session_id, events=[result(first.id, "A")])  # type: ignore[list-item]
        until_idle(stream)
        asked = fake.request_count
        [sent] = sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}]).data
        closed = until_idle(stream)
        assert kinds(closed) == ["user.interrupt", "agent.tool_result", "session.status_idle"]
        assert closed[0].id == sent.id
        assert (closed[1].tool_use_id, closed[1].is_error) == (second.id, True)
        assert closed[-1].stop_reason.type == "end_turn"
        assert fake.request_count == asked
        with pytest.raises(anthropic.BadRequestError, match="already has a result"):
            sdk.beta.sessions.events.send(session_id, events=[result(second.id, "B")])  # type: ignore[list-item]
        sdk.beta.sessions.events.send(session_id, events=[message("go on")])  # type: ignore[list-item]
        turn = until_idle(stream)
    assert turn[-1].stop_reason.type == "end_turn"
    assert any(e.type == "agent.message" for e in turn)
    sent_back = fake.requests[-1].body["messages"][-1]["content"]
    answers = [b for b in sent_back if b["type"] == "tool_result"]
    assert [(b["tool_use_id"], b.get("is_error", False)) for b in answers] == [
        (first.id, False),
        (second.id, True),
    ]


def test_an_interrupt_then_a_message_in_one_request_stops_then_does_this(
    sdk: anthropic.Anthropic,
) -> None:
    """A confirmation the session waits on is closed too; the message after the
    interrupt starts the next turn, and an answer after it to a closed call is
    refused with the whole request."""
    session_id = new_session(sdk, [LOOKUP, ASKS_BEFORE_WRITING])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        lookup, write = waiting_on(sdk, session_id, stream, "lookup and write")
        interrupt = {"type": "user.interrupt"}
        with pytest.raises(anthropic.BadRequestError, match="closed by the interrupt"):
            sdk.beta.sessions.events.send(session_id, events=[interrupt, result(lookup.id, "A")])  # type: ignore[list-item]
        sdk.beta.sessions.events.send(session_id, events=[interrupt, message("instead")])  # type: ignore[list-item]
        closed = until_idle(stream)
        turn = until_idle(stream)
    assert kinds(closed) == [
        "user.interrupt",
        "agent.tool_result",
        "agent.tool_result",
        "session.status_idle",
    ]
    assert {e.tool_use_id for e in closed[1:3]} == {lookup.id, write.id}
    assert closed[-1].stop_reason.type == "end_turn"
    assert kinds(turn)[:2] == ["user.message", "session.status_running"]
    assert turn[-1].stop_reason.type == "end_turn"
