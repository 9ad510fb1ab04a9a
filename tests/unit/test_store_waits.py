"""A session idle on tool calls (``store._waits``) on every backend (SQLite,
PostgreSQL and the in-memory store): what answers to some of the calls log,
in the transaction that accepts them."""

from __future__ import annotations

import pytest

from stead.ids import new_id
from stead.store import ClaimTerms, NewEvent, RunStatus, RunWrite, SqlStore
from tests.databases import STORES
from tests.unit.conftest import definition, new_session, user_message

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
ACCEPT_ALL = lambda _session, _lookup: None  # noqa: E731
TERMS = ClaimTerms(owner="brain", lease_seconds=30.0, opening=lambda _attempts: [])


def _result(use_id: str) -> NewEvent:
    body = {"custom_tool_use_id": use_id, "content": [{"type": "text", "text": "ok"}]}
    return NewEvent(new_id("event"), "user.custom_tool_result", body)


async def _waiting(store: SqlStore) -> tuple[str, str]:
    """(workspace id, session id) of a session idle on custom calls ``a`` and ``b``."""
    workspace_id, session_id = await new_session(store)
    accepted = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_hi")], ACCEPT_ALL, claim=TERMS
    )
    assert accepted.started is not None
    uses = [NewEvent(i, "agent.custom_tool_use", {"name": "lookup", "input": {}}) for i in "ab"]
    idle = {"stop_reason": {"type": "requires_action", "event_ids": ["a", "b"]}}
    waits = NewEvent(new_id("event"), "session.status_idle", idle)
    await store.run_write(
        accepted.started.claim, RunWrite(events=[*uses, waits], status=RunStatus.DONE)
    )
    return workspace_id, session_id


async def test_an_answer_to_some_of_the_calls_re_emits_the_wait_and_queues_no_run(
    store: SqlStore,
) -> None:
    workspace_id, session_id = await _waiting(store)
    answer = _result("a")
    accepted = await store.accept_user_events(
        workspace_id, session_id, [answer], ACCEPT_ALL, claim=TERMS
    )
    assert (accepted.starts_work, accepted.started) == (False, None)
    assert await store.queued_runs(session_id) == []
    assert [e.id for e in accepted.echoes] == [answer.id]
    assert [e.type for e in accepted.published] == [
        "user.custom_tool_result",
        "session.status_idle",
    ]
    again = accepted.published[-1]
    assert again.body["stop_reason"] == {"type": "requires_action", "event_ids": ["b"]}
    last = await store.accept_user_events(
        workspace_id, session_id, [_result("b")], ACCEPT_ALL, claim=TERMS
    )
    assert last.starts_work and last.started is not None
    assert [e.type for e in last.published] == ["user.custom_tool_result"]


@pytest.mark.parametrize("environment", ["cloud", "self_hosted"])
async def test_an_interrupt_answers_each_call_waited_on_by_its_kind(
    store: SqlStore, environment: str
) -> None:
    """A custom call and a built-in one get an ``agent.tool_result`` (a
    self-hosted environment's worker a ``user.tool_result``, the only answer
    it takes), an MCP call an ``agent.mcp_tool_result``; then the idle."""
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())
    env = await store.create_environment(workspace.id, "e", None, {"type": environment}, {}, None)
    session, _ = await store.create_session(
        workspace.id, (agent.id, None), lambda a: {"id": a.id}, env.id, {}, []
    )
    accepted = await store.accept_user_events(
        workspace.id, session.id, [user_message("sevt_hi")], ACCEPT_ALL, claim=TERMS
    )
    assert accepted.started is not None
    uses = [
        NewEvent("c", "agent.custom_tool_use", {"name": "lookup", "input": {}}),
        NewEvent("t", "agent.tool_use", {"name": "write", "evaluated_permission": "ask"}),
        NewEvent("m", "agent.mcp_tool_use", {"name": "x", "evaluated_permission": "ask"}),
    ]
    idle = {"stop_reason": {"type": "requires_action", "event_ids": ["c", "t", "m"]}}
    waits = NewEvent(new_id("event"), "session.status_idle", idle)
    await store.run_write(
        accepted.started.claim, RunWrite(events=[*uses, waits], status=RunStatus.DONE)
    )
    interrupt = NewEvent(new_id("event"), "user.interrupt", {})
    done = await store.accept_user_events(
        workspace.id, session.id, [interrupt], ACCEPT_ALL, claim=TERMS
    )
    assert (done.starts_work, [e.id for e in done.echoes]) == (False, [interrupt.id])
    built_in = "user.tool_result" if environment == "self_hosted" else "agent.tool_result"
    assert [(e.type, e.body.get("is_error")) for e in done.published] == [
        ("user.interrupt", None),
        ("agent.tool_result", True),
        (built_in, True),
        ("agent.mcp_tool_result", True),
        ("session.status_idle", None),
    ]
    assert done.published[-1].body["stop_reason"] == {"type": "end_turn"}
    another = NewEvent(new_id("event"), "user.interrupt", {})
    again = await store.accept_user_events(workspace.id, session.id, [another], ACCEPT_ALL)
    assert [e.type for e in again.published] == ["user.interrupt"]  # nothing left to close


async def test_a_message_waits_in_the_queue_with_the_calls_and_after_them(
    store: SqlStore,
) -> None:
    """Sent while the session waits, a message is queued and starts nothing; one
    sent with the answers that end the wait joins it behind, and the run those
    answers queued logs both, in order, once its turn ends."""
    workspace_id, session_id = await _waiting(store)
    meanwhile = user_message(new_id("event"), "meanwhile")
    queued = await store.accept_user_events(
        workspace_id, session_id, [meanwhile], ACCEPT_ALL, claim=TERMS
    )
    assert (queued.starts_work, queued.logged) == (False, [])
    assert [(e.id, e.seq) for e in queued.published] == [(meanwhile.id, None)]
    assert await store.queued_runs(session_id) == []
    then = user_message(new_id("event"), "then")
    answered = await store.accept_user_events(
        workspace_id, session_id, [_result("a"), _result("b"), then], ACCEPT_ALL, claim=TERMS
    )
    assert answered.started is not None
    assert [e.type for e in answered.logged] == ["user.custom_tool_result"] * 2
    assert [(e.id, e.seq) for e in answered.echoes[2:]] == [(then.id, None)]
    ended = await store.run_write(
        answered.started.claim,
        RunWrite(status=RunStatus.DONE, drain_pending=True, since=0),
    )
    assert [e.id for e in ended.logged] == [meanwhile.id, then.id]
    assert ended.next_run is not None


async def test_an_interrupt_logs_what_was_queued_while_the_calls_waited(
    store: SqlStore,
) -> None:
    """Queued before the interrupt in the same request, the message is logged
    after the idle that ends the turn, unanswered, and echoed as logged."""
    workspace_id, session_id = await _waiting(store)
    meanwhile = user_message(new_id("event"), "meanwhile")
    interrupt = NewEvent(new_id("event"), "user.interrupt", {})
    done = await store.accept_user_events(
        workspace_id, session_id, [meanwhile, interrupt], ACCEPT_ALL, claim=TERMS
    )
    assert (done.starts_work, await store.queued_runs(session_id)) == (False, [])
    assert [e.type for e in done.published] == [
        "user.interrupt",
        "agent.tool_result",
        "agent.tool_result",
        "session.status_idle",
        "user.message",
    ]
    echoed = done.echoes[0]
    assert (echoed.id, echoed.seq) == (meanwhile.id, done.published[-1].seq)
    assert await store.drain_pending(session_id) == []
