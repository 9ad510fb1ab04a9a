"""The agent loop through the official SDK, against a real server and the fake model,
checked event by event: tools, custom tools, confirmations, interrupts, queued messages;
on SQLite and on PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anthropic
import pytest
from sqlalchemy import select

from stead.store.tables import ops
from stead.testing import (
    Delay,
    FakeModel,
    FaultRule,
    ServeForker,
    ServerProcess,
)
from tests.conftest import loop_env, sdk_of, store_env
from tests.databases import BACKENDS
from tests.databases import engine as engine_of
from tests.integration.helpers import kinds, until_idle
from tests.integration.loop_scenarios import scripted, slow_first_answer

Json = dict[str, Any]


@pytest.fixture(scope="module", params=BACKENDS)
def loop_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    faults = [FaultRule(Delay(1.5), times=None, when=slow_first_answer)]
    with store_env(request) as extra, FakeModel(scripted, faults=faults) as fake:
        env = loop_env(fake, **extra)
        process = ServerProcess(tmp_path_factory.mktemp("loop"), env=env, forker=forker).start()
        yield process
        process.stop()


@pytest.fixture
def sdk(loop_server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(loop_server) as client:
        yield client


def new_session(sdk: anthropic.Anthropic, tools: list[Json]) -> str:
    agent = sdk.beta.agents.create(name="loop", model="claude-sonnet-4-6", tools=tools)  # type: ignore[arg-type]
    env = sdk.beta.environments.create(name=f"loop-{uuid.uuid4().hex[:8]}")
    return sdk.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def say(text: str) -> Json:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def slow_turn_started(sdk: anthropic.Anthropic, session_id: str, stream: Any) -> None:
    """Sends a message whose answer takes the model 1.5 s, and reads ``stream``
    until its request is sent: meanwhile the log holds still."""
    sdk.beta.sessions.events.send(session_id, events=[say("slow start")])
    for event in stream:
        if event.type == "span.model_request_start":
            return
    raise AssertionError("the stream ended before the model request")


TOOLSET = {"type": "agent_toolset_20260401"}
ASKS_BEFORE_WRITING = {
    "type": "agent_toolset_20260401",
    "configs": [{"name": "write", "permission_policy": {"type": "always_ask"}}],
}


def test_a_turn_with_every_builtin_tool(
    sdk: anthropic.Anthropic, loop_server: ServerProcess
) -> None:
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("tools please")])
        events = until_idle(stream)
    step = [
        "span.model_request_start",
        "agent.tool_use",
        "span.model_request_end",
        "agent.tool_result",
    ]
    assert kinds(events) == [
        "user.message",
        "session.status_running",
        "span.model_request_start",
        "agent.message",
        "agent.tool_use",
        "span.model_request_end",
        "agent.tool_result",
        *step * 5,
        "span.model_request_start",
        "agent.message",
        "span.model_request_end",
        "session.usage",
        "session.status_idle",
    ]
    uses = [e for e in events if e.type == "agent.tool_use"]
    results = {e.tool_use_id: e for e in events if e.type == "agent.tool_result"}
    assert [u.name for u in uses] == ["write", "read", "edit", "bash", "glob", "grep"]
    assert all(u.evaluated_permission == "allow" for u in uses)
    outputs = {u.name: results[u.id].content[0].text for u in uses}
    assert not any(results[u.id].is_error for u in uses)
    assert "hello world" in outputs["read"]
    assert "hello stead" in outputs["bash"] and "42" in outputs["bash"]
    assert "notes.txt" in outputs["glob"] and "hello stead" in outputs["grep"]
    ends = [e for e in events if e.type == "span.model_request_end"]
    starts = [e.id for e in events if e.type == "span.model_request_start"]
    assert [e.model_request_start_id for e in ends] == starts
    assert all(e.model_usage.output_tokens > 0 for e in ends)
    assert events[-1].stop_reason.type == "end_turn"
    usage = sdk.beta.sessions.retrieve(session_id).usage
    assert usage.output_tokens == sum(e.model_usage.output_tokens for e in ends)
    workspace = Path(loop_server.data_dir) / "sandboxes" / session_id / "workspace"
    assert (workspace / "notes.txt").read_text() == "hello stead\n"
    listed = [e.id for e in sdk.beta.sessions.events.list(session_id)]
    assert listed == [e.id for e in events]
    # Each result and the span of the request that answers it are one commit
    # (``RunWrite.then``): one transaction's stamp. So are each answer and the
    # start of the call it asks for, in the ledger.
    for index, event in enumerate(events):
        if event.type == "agent.tool_result":
            following = events[index + 1]
            assert following.type == "span.model_request_start"
            assert following.processed_at == event.processed_at
    started = tool_starts(loop_server, session_id)
    assert {u.name: u.processed_at for u in uses} == started


def test_a_refused_answer_idles_the_session_with_its_reason_and_details(
    sdk: anthropic.Anthropic, loop_server: ServerProcess
) -> None:
    """Its text is kept; a tool call in it is neither run nor kept. The next
    message is answered as the first of a new conversation: the model is never
    shown the refused turn again (it would refuse again)."""
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("refused please")])
        refused = until_idle(stream)
        sdk.beta.sessions.events.send(session_id, events=[say("something else")])
        answered = until_idle(stream)
    idle = refused[-1]
    assert (idle.stop_reason.type, idle.stop_details.type) == ("refusal", "refusal")
    assert idle.stop_details.category == "cyber"
    assert idle.stop_details.explanation == "It could enable harm to computer systems."
    assert "fallback_credit_token" not in idle.model_dump()["stop_details"]
    assert [e.content[0].text for e in refused if e.type == "agent.message"] == [
        "I can't help with that."
    ]
    assert not [e for e in refused if e.type in ("agent.tool_use", "agent.tool_result")]
    # The session goes on. The fake plays the scenario its request's first user
    # message names, so a request that still held "refused please" would get
    # the scenario's second answer; this one holds only the new message.
    assert answered[-1].stop_reason.type == "end_turn" and answered[-1].stop_details is None
    assert [e.content[0].text for e in answered if e.type == "agent.message"] == ["answer 0"]
    listed = sdk.beta.sessions.events.list(session_id, types=["session.status_idle"]).data
    assert [e.stop_reason.type for e in listed] == ["refusal", "end_turn"]  # type: ignore[union-attr]
    workspace = Path(loop_server.data_dir) / "sandboxes" / session_id / "workspace"
    assert not (workspace / "refused").exists()
    # A category the SDK does not know yet is none, so no client fails to read the event.
    unnamed = new_session(sdk, [])
    with sdk.beta.sessions.events.stream(unnamed) as stream:
        sdk.beta.sessions.events.send(unnamed, events=[say("unnamed refusal")])
        idle = until_idle(stream)[-1]
    assert idle.stop_details.model_dump() == {
        "type": "refusal",
        "category": None,
        "explanation": None,
    }


def test_a_tool_call_cut_off_at_max_tokens_is_not_run(
    sdk: anthropic.Anthropic, loop_server: ServerProcess
) -> None:
    """An answer that reached ``max_tokens`` inside its last tool call: that
    call's input is only as far as it came, so it is neither logged nor run;
    the answer's text and its whole calls before it stand."""
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("cutoff please")])
        turn = until_idle(stream)
    uses = [e.name for e in turn if e.type == "agent.tool_use"]  # type: ignore[union-attr]
    assert uses == ["read"]
    assert [e.content[0].text for e in turn if e.type == "agent.message"] == [  # type: ignore[union-attr]
        "Reading, then cleaning up.",
        "Read it.",
    ]
    workspace = Path(loop_server.data_dir) / "sandboxes" / session_id / "workspace"
    assert not (workspace / "cut-off").exists()


def test_deleting_a_session_removes_its_sandbox(
    sdk: anthropic.Anthropic, loop_server: ServerProcess
) -> None:
    """``unsafe_local`` sandboxes have no lease to end: the deletion itself
    takes the session's files away."""
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("tools please")])
        until_idle(stream)
    sandbox = Path(loop_server.data_dir) / "sandboxes" / session_id
    assert (sandbox / "workspace" / "notes.txt").read_text() == "hello stead\n"
    assert sdk.beta.sessions.delete(session_id).type == "session_deleted"
    assert not sandbox.exists()


def tool_starts(server: ServerProcess, session_id: str) -> dict[str, datetime]:
    """When the ledger recorded each tool call of the session as started, by tool."""
    engine = engine_of(server.database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(ops.c.kind, ops.c.created_at).where(
                    ops.c.session_id == session_id, ops.c.kind.like("tool:%")
                )
            ).all()
    finally:
        engine.dispose()
    return {kind.removeprefix("tool:"): created for kind, created in rows}


LOOKUP = {
    "type": "custom",
    "name": "lookup",
    "description": "Look something up",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}
"""The custom tool the "custom" scenario calls."""


def test_custom_tool_round_trip(sdk: anthropic.Anthropic) -> None:
    session_id = new_session(sdk, [LOOKUP])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("custom tool")])
        first = until_idle(stream)
        use = next(e for e in first if e.type == "agent.custom_tool_use")
        assert (use.name, use.input) == ("lookup", {"q": "weather"})
        idle = first[-1]
        assert idle.stop_reason.type == "requires_action"
        assert idle.stop_reason.event_ids == [use.id]
        assert sdk.beta.sessions.retrieve(session_id).status == "idle"
        result = {
            "type": "user.custom_tool_result",
            "custom_tool_use_id": use.id,
            "content": [{"type": "text", "text": "sunny"}],
        }
        sent = sdk.beta.sessions.events.send(session_id, events=[result, result]).data
        second = until_idle(stream)
        # Sent again (a client retrying): the logged result is the answer, and no turn runs.
        again = sdk.beta.sessions.events.send(session_id, events=[result]).data
    assert [e.id for e in again] == [sent[0].id] and len(sent) == 1
    logged = sdk.beta.sessions.events.list(session_id, types=["user.custom_tool_result"]).data
    assert [e.id for e in logged] == [sent[0].id]
    assert sdk.beta.sessions.retrieve(session_id).status == "idle"
    assert kinds(second) == [
        "user.custom_tool_result",
        "session.status_running",
        "span.model_request_start",
        "agent.message",
        "span.model_request_end",
        "session.usage",
        "session.status_idle",
    ]
    assert second[-1].stop_reason.type == "end_turn"


def test_a_custom_tool_result_naming_a_file_is_refused_not_sent_to_the_model(
    sdk: anthropic.Anthropic,
) -> None:
    """Before, it was logged and sent on as it came: the model API has no such
    file (nor the Files API's beta), so it would refuse every later request."""
    session_id = new_session(sdk, [LOOKUP])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("custom tool")])
        use = next(e for e in until_idle(stream) if e.type == "agent.custom_tool_use")
    image = {"type": "image", "source": {"type": "file", "file_id": "file_0123456789"}}
    result = {"type": "user.custom_tool_result", "custom_tool_use_id": use.id, "content": [image]}
    with pytest.raises(anthropic.BadRequestError, match=r"events\.0\.content\.0\.source\.type"):
        sdk.beta.sessions.events.send(session_id, events=[result])  # type: ignore[list-item]
    assert not sdk.beta.sessions.events.list(session_id, types=["user.custom_tool_result"]).data


def test_a_confirmation_for_a_call_that_needs_none_is_refused(sdk: anthropic.Anthropic) -> None:
    """Logged, it would start a turn with nothing to do."""
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("ask first")])
        use = next(e for e in until_idle(stream) if e.type == "agent.tool_use")
    confirm = {"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "allow"}
    with pytest.raises(anthropic.BadRequestError, match="needs no confirmation"):
        sdk.beta.sessions.events.send(session_id, events=[confirm])  # type: ignore[list-item]


@pytest.mark.parametrize("answer", ["allow", "deny"])
def test_always_ask_waits_for_a_confirmation(
    sdk: anthropic.Anthropic, loop_server: ServerProcess, answer: str
) -> None:
    session_id = new_session(sdk, [ASKS_BEFORE_WRITING])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("ask first")])
        first = until_idle(stream)
        use = next(e for e in first if e.type == "agent.tool_use")
        assert (use.evaluated_permission, use.evaluation.type) == ("ask", "always_ask")
        assert first[-1].stop_reason.type == "requires_action"
        assert first[-1].stop_reason.event_ids == [use.id]
        confirmation: Json = {
            "type": "user.tool_confirmation",
            "tool_use_id": use.id,
            "result": answer,
        }
        if answer == "deny":
            confirmation["deny_message"] = "not today"
        [sent] = sdk.beta.sessions.events.send(session_id, events=[confirmation]).data
        second = until_idle(stream)
        # Sent again (a client retrying): the logged one is the answer, no turn runs;
        # the other answer is refused.
        again = sdk.beta.sessions.events.send(session_id, events=[confirmation]).data
        assert [e.id for e in again] == [sent.id]
        other = {**confirmation, "result": "deny" if answer == "allow" else "allow"}
        other.pop("deny_message", None)
        with pytest.raises(anthropic.BadRequestError, match="already confirmed"):
            sdk.beta.sessions.events.send(session_id, events=[other])  # type: ignore[list-item]
    logged = sdk.beta.sessions.events.list(session_id, types=["user.tool_confirmation"]).data
    assert [e.id for e in logged] == [sent.id]
    assert sdk.beta.sessions.retrieve(session_id).status == "idle"
    result = next(e for e in second if e.type == "agent.tool_result")
    written = Path(loop_server.data_dir) / "sandboxes" / session_id / "workspace" / "asked.txt"
    if answer == "allow":
        assert not result.is_error and written.read_text() == "approved\n"
    else:
        assert result.is_error and "not today" in result.content[0].text
        assert not written.exists()
    assert second[-1].stop_reason.type == "end_turn"


def test_a_call_confirmed_after_its_tool_was_disabled_is_not_run(
    sdk: anthropic.Anthropic, loop_server: ServerProcess
) -> None:
    """The session waits idle for the confirmation, and sessions.update may
    disable the tool meanwhile: the confirmation no longer lets it run."""
    session_id = new_session(sdk, [ASKS_BEFORE_WRITING])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("ask first")])
        use = next(e for e in until_idle(stream) if e.type == "agent.tool_use")
        disabled = {
            "type": "agent_toolset_20260401",
            "configs": [{"name": "write", "enabled": False}],
        }
        sdk.beta.sessions.update(session_id, agent={"tools": [disabled]})  # type: ignore[list-item]
        confirm = {"type": "user.tool_confirmation", "tool_use_id": use.id, "result": "allow"}
        sdk.beta.sessions.events.send(session_id, events=[confirm])  # type: ignore[list-item]
        second = until_idle(stream)
    result = next(e for e in second if e.type == "agent.tool_result")
    assert result.tool_use_id == use.id and result.is_error
    assert "no longer available" in result.content[0].text
    written = Path(loop_server.data_dir) / "sandboxes" / session_id / "workspace" / "asked.txt"
    assert not written.exists()
    assert second[-1].stop_reason.type == "end_turn"


def test_interrupt_stops_a_long_command(
    sdk: anthropic.Anthropic, loop_server: ServerProcess
) -> None:
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(session_id, events=[say("sleep now")])
        for event in stream:
            if event.type == "agent.tool_use":
                break
        sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
        rest = until_idle(stream)
    result = next(e for e in rest if e.type == "agent.tool_result")
    assert result.is_error
    assert rest[-1].stop_reason.type == "end_turn"
    assert sdk.beta.sessions.retrieve(session_id).status == "idle"
    workspace = Path(loop_server.data_dir) / "sandboxes" / session_id / "workspace"
    assert not (workspace / "woke.txt").exists()


def test_an_interrupt_sent_with_the_message_stops_the_turn_it_starts(
    sdk: anthropic.Anthropic, loop_server: ServerProcess
) -> None:
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.events.send(
            session_id, events=[say("sleep now"), {"type": "user.interrupt"}]
        )
        turn = until_idle(stream)
    assert turn[-1].stop_reason.type == "end_turn"
    assert not [e for e in turn if e.type in ("agent.tool_use", "agent.message")]
    workspace = Path(loop_server.data_dir) / "sandboxes" / session_id / "workspace"
    assert not (workspace / "woke.txt").exists()
    # Sent before the message ("stop, then do this"), it leaves the new turn alone.
    fresh = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(fresh) as stream:
        sdk.beta.sessions.events.send(
            fresh, events=[{"type": "user.interrupt"}, say("hello there")]
        )
        answered = until_idle(stream)
    assert [e.type for e in answered if e.type == "agent.message"] == ["agent.message"]


@pytest.mark.parametrize("together", [False, True], ids=["apart", "in-one-request"])
def test_a_message_sent_after_an_interrupt_starts_the_next_turn(
    sdk: anthropic.Anthropic, together: bool
) -> None:
    """Stop, then do this: the interrupt ends the turn, the message queued
    before it is logged unanswered, and the one sent after it (in a request of
    its own, or after the interrupt in the same request) is answered by the
    next turn. Before, it waited for whatever the client sent next."""
    session_id = new_session(sdk, [TOOLSET])
    interrupt = {"type": "user.interrupt"}
    with sdk.beta.sessions.events.stream(session_id) as stream:
        slow_turn_started(sdk, session_id, stream)
        sdk.beta.sessions.events.send(session_id, events=[say("before the stop")])
        if together:
            sdk.beta.sessions.events.send(session_id, events=[interrupt, say("do B instead")])
        else:
            sdk.beta.sessions.events.send(session_id, events=[interrupt])
            sdk.beta.sessions.events.send(session_id, events=[say("do B instead")])
        events = until_idle(stream, idles=2)
    idles = [e for e in events if e.type == "session.status_idle"]
    assert [e.stop_reason.type for e in idles] == ["end_turn", "end_turn"]
    answered = [e for e in events if e.type == "agent.message"]
    assert len(answered) == 1 and events.index(answered[0]) > events.index(idles[0])
    history = [e for e in sdk.beta.sessions.events.list(session_id) if e.type == "user.message"]
    assert [e.content[0].text for e in history] == ["slow start", "before the stop", "do B instead"]


def test_messages_sent_during_a_turn_queue_and_are_answered_after_it(
    sdk: anthropic.Anthropic,
) -> None:
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        slow_turn_started(sdk, session_id, stream)
        queued = sdk.beta.sessions.events.send(session_id, events=[say("q1"), say("q2")])
        assert [e.processed_at for e in queued.data] == [None, None]
        pending = sdk.beta.sessions.events.list(session_id, order="desc", limit=2)
        assert [e.id for e in pending.data] == [e.id for e in reversed(queued.data)]
        events = until_idle(stream, idles=2)
    ids = [e.id for e in queued.data]
    echoes = [e for e in events if e.id in ids and e.processed_at is None]
    logged = [e for e in events if e.id in ids and e.processed_at is not None]
    assert [e.id for e in echoes] == ids and [e.id for e in logged] == ids
    first_idle = next(i for i, e in enumerate(events) if e.type == "session.status_idle")
    assert all(events.index(e) > first_idle for e in logged)
    history = [e for e in sdk.beta.sessions.events.list(session_id) if e.type == "user.message"]
    assert [e.content[0].text for e in history] == ["slow start", "q1", "q2"]
    answers = [e for e in events if e.type == "agent.message"]
    assert len(answers) == 2


def test_a_listing_that_reached_the_queue_goes_on_through_what_was_logged_since(
    sdk: anthropic.Anthropic,
) -> None:
    """A page ending on a queued event, the queue drained before the next page:
    the next page lists what was logged meanwhile (the drained messages among
    it) instead of an empty queue; before, the listing ended there."""
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        slow_turn_started(sdk, session_id, stream)
        sdk.beta.sessions.events.send(session_id, events=[say("q1"), say("q2")])
        everything = sdk.beta.sessions.events.list(session_id, limit=1000).data
        first = sdk.beta.sessions.events.list(session_id, limit=len(everything) - 1)
        assert first.data[-1].processed_at is None and first.has_next_page()  # ends on q1
        until_idle(stream, idles=2)
    listed = list(first.data)
    page = first
    while page.has_next_page():
        page = page.get_next_page()
        listed += page.data
    final = [e.id for e in sdk.beta.sessions.events.list(session_id, limit=1000).data]
    assert set(final) <= {e.id for e in listed}
    texts = [e.content[0].text for e in listed if e.type == "user.message" and e.processed_at]
    assert texts == ["slow start", "q1", "q2"]


def test_a_newest_first_listing_lists_nothing_twice_when_the_queue_drains(
    sdk: anthropic.Anthropic,
) -> None:
    """Newest first, a page ending in the queue, the queue drained and the turn
    ended before the next page: the next page goes on down the log as it was
    when the listing began. Before, it started again at the log's new top and
    listed the drained messages a second time, above the events it had to list."""
    session_id = new_session(sdk, [TOOLSET])
    with sdk.beta.sessions.events.stream(session_id) as stream:
        slow_turn_started(sdk, session_id, stream)
        queued = sdk.beta.sessions.events.send(session_id, events=[say("q1"), say("q2")])
        before = [e.id for e in sdk.beta.sessions.events.list(session_id, limit=1000).data]
        first = sdk.beta.sessions.events.list(session_id, order="desc", limit=1)
        assert [e.id for e in first.data] == [queued.data[1].id]  # q2, still queued
        until_idle(stream, idles=2)
    listed = [e.id for e in first.data]
    page = first
    while page.has_next_page():
        page = page.get_next_page()
        listed += [e.id for e in page.data]
    assert len(listed) == len(set(listed))  # nothing twice
    assert listed[0] == queued.data[1].id
    # What was logged when the listing began, newest first, after the queue.
    logged_then = [i for i in before if i not in {e.id for e in queued.data}]
    assert listed[-len(logged_then) :] == list(reversed(logged_then))


def test_stream_previews_add_up_to_the_logged_message(sdk: anthropic.Anthropic) -> None:
    session_id = new_session(sdk, [TOOLSET])
    deltas = ["agent.message", "agent.thinking"]
    with (
        sdk.beta.sessions.events.stream(session_id, event_deltas=deltas) as previewed,
        sdk.beta.sessions.events.stream(session_id) as plain,
    ):
        sdk.beta.sessions.events.send(session_id, events=[say("previews please")])
        seen = until_idle(previewed)
        unpreviewed = until_idle(plain)
    types = kinds(seen)
    thinking = next(e for e in seen if e.type == "agent.thinking")
    logged = next(e for e in seen if e.type == "agent.message")
    starts = [e for e in seen if e.type == "event_start"]
    assert [(s.event.type, s.event.id) for s in starts] == [
        ("agent.thinking", thinking.id),
        ("agent.message", logged.id),
    ]
    fragments = [e for e in seen if e.type == "event_delta"]
    assert len(fragments) > 2 and {f.event_id for f in fragments} == {logged.id}
    entries: dict[int, str] = {}
    for fragment in fragments:
        index = fragment.delta.index or 0
        entries[index] = entries.get(index, "") + fragment.delta.content.text
    assert [entries[i] for i in sorted(entries)] == [b.text for b in logged.content]
    assert len(logged.content) == 2
    # Each preview comes before the event it previews, and the request's end after both.
    message_start = seen.index(starts[1])
    assert types.index("event_start") < types.index("agent.thinking")
    assert message_start < seen.index(fragments[0]) < seen.index(logged)
    assert seen.index(fragments[-1]) < seen.index(logged) < types.index("span.model_request_end")
    # Without event_deltas a stream has no previews, and the log never holds any.
    assert [e.id for e in unpreviewed] == [e.id for e in seen if not e.type.startswith("event_")]
    listed = kinds(list(sdk.beta.sessions.events.list(session_id)))
    assert "event_start" not in listed and "event_delta" not in listed
