"""A session idle on tool calls (``requires_action``) through the official SDK,
against a real server and the fake model, on SQLite and on PostgreSQL: answers
to some of the calls it waits on, what comes of the rest, and messages sent
while it waits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, Text, ToolCall, Turn
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env, make_client, sdk_of, serving, store_env
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
GATED = "for i in $(seq 1200); do [ -e go ] && break; sleep 0.05; done"
"""A command that runs until the test makes ``go`` in the workspace (a minute at most)."""
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
    "gated bash and a lookup": [
        ToolCall("bash", {"command": GATED}),
        ToolCall("lookup", {"q": "a"}),
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


def queue(sdk: anthropic.Anthropic, session_id: str, stream: Any, text: str) -> Any:
    """Sends a message that must be queued; returns its echo, which the stream
    shows as queued too (read up to it)."""
    [queued] = sdk.beta.sessions.events.send(session_id, events=[message(text)]).data  # type: ignore[list-item]
    assert queued.processed_at is None
    echoed = next(e for e in stream if e.id == queued.id)
    assert echoed.processed_at is None
    return queued


def texts_of_last_turn(request: Any) -> list[str]:
    """The text blocks of the request's last (user) message."""
    return [b["text"] for b in request.body["messages"][-1]["content"] if b["type"] == "text"]


def results_of_last_turn(request: Any) -> list[str]:
    sent = request.body["messages"][-1]["content"]
    return [b["content"][0]["text"] for b in sent if b["type"] == "tool_result"]


def test_a_message_sent_while_calls_wait_is_queued_until_their_turn_ends(
    sdk: anthropic.Anthropic, fake: FakeModel
) -> None:
    """The calls' turn is not over (spec §3.4), so the message waits for it as
    it would for a running turn: queued, the session still waiting on the same
    calls, answered by a turn of its own once the calls' turn has ended. Before,
    it started a run that logged running, usage and the same wait again."""
    session_id = new_session(sdk, [LOOKUP])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        first, second = waiting_on(sdk, session_id, stream, "two lookups")
        asked = fake.request_count
        queued = queue(sdk, session_id, stream, "meanwhile")
        assert sdk.beta.sessions.retrieve(session_id).status == "idle"
        sdk.beta.sessions.events.send(session_id, events=[result(first.id, "A")])  # type: ignore[list-item]
        partly = until_idle(stream)
        assert kinds(partly) == ["user.custom_tool_result", "session.status_idle"]
        assert partly[-1].stop_reason.event_ids == [second.id]
        listed = {e.id: e for e in sdk.beta.sessions.events.list(session_id)}
        assert listed[queued.id].processed_at is None
        sdk.beta.sessions.events.send(session_id, events=[result(second.id, "B")])  # type: ignore[list-item]
        calls_turn = until_idle(stream)
        its_own = until_idle(stream)
    assert kinds(calls_turn)[:2] == ["user.custom_tool_result", "session.status_running"]
    assert calls_turn[-1].stop_reason.type == "end_turn"
    assert kinds(its_own)[:2] == ["user.message", "session.status_running"]
    assert its_own[0].id == queued.id and its_own[0].processed_at is not None
    assert its_own[-1].stop_reason.type == "end_turn"
    assert fake.request_count == asked + 2
    answers, answered = fake.requests[-2:]
    assert (results_of_last_turn(answers), texts_of_last_turn(answers)) == (["A", "B"], [])
    assert texts_of_last_turn(answered) == ["meanwhile"]


def test_a_message_queued_while_a_turn_ran_stays_queued_while_its_calls_wait(
    sdk: anthropic.Anthropic, server: ServerProcess, fake: FakeModel
) -> None:
    """Sent while the turn ran its command, the message is still queued when
    the turn goes on to wait for a custom tool's result, and is answered after
    that turn ends. Before, the wait logged it (processed, unanswered) between
    the call and its result."""
    session_id = new_session(sdk, [LOOKUP, {"type": "agent_toolset_20260401"}])
    workspace = Path(server.data_dir) / "sandboxes" / session_id / "workspace"
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[message("gated bash and a lookup")])  # type: ignore[list-item]
        lookup = next(e for e in stream if e.type == "agent.custom_tool_use")
        queued = queue(sdk, session_id, stream, "meanwhile")
        go(workspace)
        waits = until_idle(stream)
        assert waits[-1].stop_reason.type == "requires_action"
        assert waits[-1].stop_reason.event_ids == [lookup.id]
        listed = {e.id: e for e in sdk.beta.sessions.events.list(session_id)}
        assert listed[queued.id].processed_at is None
        sdk.beta.sessions.events.send(session_id, events=[result(lookup.id, "A")])  # type: ignore[list-item]
        calls_turn = until_idle(stream)
        its_own = until_idle(stream)
    assert calls_turn[-1].stop_reason.type == "end_turn"
    assert kinds(its_own)[:2] == ["user.message", "session.status_running"]
    assert its_own[0].id == queued.id
    answers, answered = fake.requests[-2:]
    assert (results_of_last_turn(answers)[-1], texts_of_last_turn(answers)) == ("A", [])
    assert texts_of_last_turn(answered) == ["meanwhile"]


def go(workspace: Path) -> None:
    """Lets ``GATED`` end, once its sandbox's workspace is there (bounded)."""
    deadline = time.monotonic() + 30
    while not workspace.is_dir():
        assert time.monotonic() < deadline, f"no workspace {workspace}"
        time.sleep(0.02)
    (workspace / "go").touch()


def test_an_interrupt_logs_what_was_queued_while_calls_waited_unanswered(
    sdk: anthropic.Anthropic, fake: FakeModel
) -> None:
    """As when it stops a running turn: what was queued before it is logged,
    not answered, and the session idles with end_turn, asking nothing."""
    session_id = new_session(sdk, [LOOKUP])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        first, second = waiting_on(sdk, session_id, stream, "two lookups")
        asked = fake.request_count
        queued = queue(sdk, session_id, stream, "meanwhile")
        sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])  # type: ignore[list-item]
        closed = until_idle(stream)
        assert kinds(closed) == [
            "user.interrupt",
            "agent.tool_result",
            "agent.tool_result",
            "session.status_idle",
        ]
        assert {e.tool_use_id for e in closed[1:3]} == {first.id, second.id}
        assert closed[-1].stop_reason.type == "end_turn"
        flushed = next(iter(stream))
    assert (flushed.id, flushed.processed_at is not None) == (queued.id, True)
    assert sdk.beta.sessions.retrieve(session_id).status == "idle"
    assert fake.request_count == asked


@pytest.fixture
def dies_at_the_second_request(
    tmp_path: Path, fake: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    """A server of the test's own, killed (SIGKILL) as it is about to send its
    second model request; its data outlives it."""
    env = loop_env(fake, STEAD_FAILPOINTS="model.before_request:2")
    doomed = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
    try:
        yield doomed
    finally:
        doomed.kill()


def test_a_message_queued_while_calls_wait_survives_a_crash_of_their_turn(
    dies_at_the_second_request: ServerProcess, fake: FakeModel, forker: ServeForker
) -> None:
    """The queue is the database's: a server killed in the turn the answers
    resumed leaves the message queued, and the server after it finishes that
    turn, then answers the message, once."""
    doomed = dies_at_the_second_request
    key = doomed.first_key
    assert key
    with make_client(doomed.url, key) as client:
        session_id = new_session(client, [LOOKUP])
        with client.beta.sessions.events.stream(session_id) as stream:
            first, second = waiting_on(client, session_id, stream, "two lookups")
        [queued] = client.beta.sessions.events.send(session_id, events=[message("meanwhile")]).data  # type: ignore[list-item]
        answers = [result(first.id, "A"), result(second.id, "B")]
        client.beta.sessions.events.send(session_id, events=answers)  # type: ignore[arg-type]
    assert doomed.wait_exit(timeout=30)
    survivor = ServerProcess(doomed.data_dir, env=loop_env(fake), forker=forker).start()
    try:
        with make_client(survivor.url, key) as client:
            events = ended_turns(client, session_id, 2)
    finally:
        survivor.stop()
    messages = [e for e in events if e.type == "user.message"]
    assert [e.id for e in messages][-1] == queued.id
    idles = [i for i, e in enumerate(events) if e.type == "session.status_idle"]
    assert idles[-2] < events.index(messages[-1]) < idles[-1]
    said = [e.content[0].text for e in events if e.type == "agent.message"]
    assert said == ["answer 1", "answer 2"]


def ended_turns(client: anthropic.Anthropic, session_id: str, count: int) -> list[Any]:
    """The log once ``count`` turns have ended (an idle other than a wait) and
    the session is idle (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        events = list(client.beta.sessions.events.list(session_id))
        ended = [
            e
            for e in events
            if e.type == "session.status_idle" and e.stop_reason.type != "requires_action"
        ]
        if len(ended) >= count and client.beta.sessions.retrieve(session_id).status == "idle":
            return events
        assert time.monotonic() < deadline, f"not {count} turns: {kinds(events)}"
        time.sleep(0.02)
