"""The run ledger on every backend (SQLite, PostgreSQL and the in-memory store):
fencing epochs, the op ledger, a claim taken with the events that queued it,
and a write that fails writing nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from stead.ids import new_id
from stead.store import (
    ClaimTerms,
    EventRecord,
    InvalidValue,
    LeaseLost,
    LeaseTerms,
    NewEvent,
    RunClaim,
    RunStatus,
    RunWrite,
    SandboxLeaseEnded,
    SessionRecord,
    SqlStore,
)
from tests.databases import STORES
from tests.unit.conftest import new_session, user_message

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
ACCEPT_ALL = lambda _session, _lookup: None  # noqa: E731


def _terms(owner: str, lease_seconds: float = 30.0) -> ClaimTerms:
    opening = lambda attempts: [NewEvent(new_id("event"), "span.attempt", {"n": attempts})]  # noqa: E731
    return ClaimTerms(owner=owner, lease_seconds=lease_seconds, opening=opening)


def _span(name: str = "span") -> NewEvent:
    return NewEvent(new_id("event"), name, {})


async def test_a_requeued_run_fences_its_old_owner_out(store: SqlStore) -> None:
    _, session_id = await new_session(store)
    await store.start_run(session_id)
    first = await store.claim_next(session_id, _terms("brain-a", lease_seconds=-1.0))
    assert first is not None and (first.claim.epoch, first.claim.attempts) == (1, 1)
    assert [e.body for e in first.opened] == [{"n": 1}]
    assert await store.requeue_runs() == [(first.claim.run_id, session_id)]
    second = await store.claim_run(first.claim.run_id, _terms("brain-b"))
    assert second is not None and (second.claim.epoch, second.claim.attempts) == (2, 2)
    assert await store.claim_run(first.claim.run_id, _terms("brain-c")) is None
    before = await store.last_seq(session_id)
    with pytest.raises(LeaseLost):
        await store.run_write(first.claim, RunWrite(events=[_span()]))
    assert not await store.renew_lease(first.claim.run_id, first.claim.epoch, 30.0)
    assert await store.last_seq(session_id) == before
    assert await store.renew_lease(second.claim.run_id, second.claim.epoch, 30.0)
    assert await store.requeue_runs() == []  # its lease is live
    assert await store.requeue_runs(not_owned_by="brain-b") == []
    done = await store.run_write(second.claim, RunWrite(events=[_span()], status=RunStatus.DONE))
    assert [e.seq for e in done.logged] == [before + 1]
    with pytest.raises(LeaseLost):  # a finished run takes no more writes
        await store.run_write(second.claim, RunWrite(events=[_span()]))


async def test_a_retrying_run_keeps_its_lease_and_is_taken_back_when_it_ends(
    store: SqlStore,
) -> None:
    """A status write of an owned run (retrying, running again) keeps its
    lease: cleared, a turn that crashed before its next renewal was owned
    for good, never taken back (its session ``running`` with nothing running)."""
    _, session_id = await new_session(store)
    await store.start_run(session_id)
    claimed = await store.claim_next(session_id, _terms("brain-a", lease_seconds=-1.0))
    assert claimed is not None
    for status in (RunStatus.RETRYING, RunStatus.RUNNING):
        await store.run_write(claimed.claim, RunWrite(events=[_span()], status=status))
    assert await store.requeue_runs() == [(claimed.claim.run_id, session_id)]


async def test_the_op_ledger_answers_a_replay_with_what_it_recorded(store: SqlStore) -> None:
    _, session_id = await new_session(store)
    await store.start_run(session_id)
    taken = await store.claim_next(session_id, _terms("brain"))
    assert taken is not None
    claim = taken.claim
    began = await store.run_write(claim, RunWrite(ops_started=[("op-1", "bash")]))
    assert began.started == {"op-1": None}
    again = await store.run_write(claim, RunWrite(ops_started=[("op-1", "bash")]))
    started = again.started["op-1"]
    assert started is not None and (started.status, started.kind, started.epoch) == (
        "started",
        "bash",
        claim.epoch,
    )
    result = {"stdout": "hi", "exit_code": 0}
    reported = RunWrite(events=[_span("tool.result")], ops_completed=[("op-1", result)])
    await store.run_write(claim, reported)
    replay = await store.run_write(claim, RunWrite(ops_started=[("op-1", "bash")], since=0))
    completed = replay.started["op-1"]
    assert completed is not None and (completed.status, completed.result) == ("completed", result)
    assert replay.log is not None and [e.type for e in replay.log][-1] == "tool.result"


async def test_a_message_to_an_idle_session_is_claimed_in_its_own_commit(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    accepted = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_hi")], ACCEPT_ALL, claim=_terms("brain")
    )
    assert accepted.starts_work and accepted.started is not None
    start = accepted.started
    assert start.session.status == "running" and start.claim.attempts == 1
    assert (start.log[0].id, start.log[0].seq) == ("sevt_hi", 1)
    assert [e.type for e in start.opened] == ["span.attempt"] and len(start.log) == 2
    assert await store.queued_runs(session_id) == []
    assert (await store.get_session(workspace_id, session_id)).status == "running"
    busy = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_later")], ACCEPT_ALL, claim=_terms("brain")
    )
    assert busy.started is None and [e.position for e in busy.echoes] == [1]


async def test_a_claim_carries_the_sessions_sandbox_lease(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    session = await store.get_session(workspace_id, session_id)
    await store.start_run(session_id)
    without = await store.claim_next(session_id, _terms("brain"))
    assert without is not None and without.lease is None
    await store.run_write(without.claim, RunWrite(status=RunStatus.DONE))
    acquired = await store.acquire_sandbox_lease(
        session_id,
        workspace_id=workspace_id,
        session_id=session_id,
        environment_id=session.environment_id,
        agent_id=session.agent["id"],
        ttl_seconds=60.0,
    )
    await store.start_run(session_id)
    leased = await store.claim_next(session_id, _terms("brain"))
    assert leased is not None and leased.lease is not None
    assert (leased.lease.sandbox_id, leased.lease.status) == (session_id, acquired.status)


async def test_a_write_makes_the_next_one_its_then_works_out_in_the_same_commit(
    store: SqlStore,
) -> None:
    _, session_id = await new_session(store)
    await store.start_run(session_id)
    taken = await store.claim_next(session_id, _terms("brain"))
    assert taken is not None
    since = await store.last_seq(session_id)
    seen: list[tuple[str, list[str]]] = []

    def then(claim: RunClaim, session: SessionRecord, log: Sequence[EventRecord]) -> RunWrite:
        seen.append((session.id, [e.type for e in log]))
        return RunWrite(events=[_span("span.next")], ops_started=[("op-next", "model")])

    result = await store.run_write(
        taken.claim, RunWrite(events=[_span("tool.result")], since=since, then=then)
    )
    assert seen == [(session_id, ["tool.result"])]
    assert [e.type for e in result.logged] == ["tool.result", "span.next"]
    assert result.log is not None and [e.type for e in result.log] == ["tool.result", "span.next"]
    assert len({e.processed_at for e in result.logged}) == 1  # one transaction's stamp
    assert result.started == {"op-next": None}
    again = await store.run_write(taken.claim, RunWrite(ops_started=[("op-next", "model")]))
    assert again.started["op-next"] is not None  # recorded as started, in that commit
    nothing = await store.run_write(
        taken.claim,
        RunWrite(
            events=[_span("more")], since=await store.last_seq(session_id), then=lambda *_: None
        ),
    )
    assert [e.type for e in nothing.logged] == ["more"]


async def test_a_write_that_fails_writes_nothing(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    await store.start_run(session_id)
    taken = await store.claim_next(session_id, _terms("brain"))
    assert taken is not None
    session = await store.get_session(workspace_id, session_id)
    await store.archive_environment(workspace_id, session.environment_id)
    lease = LeaseTerms(session_id, workspace_id, session_id, session.environment_id, None, 60.0)
    before = await store.last_seq(session_id)
    with pytest.raises(SandboxLeaseEnded):
        await store.run_write(
            taken.claim,
            RunWrite(events=[_span()], ops_started=[("op-x", "bash")], lease=lease),
        )
    unrenderable = NewEvent("sevt_nan", "span", {"x": math.nan})
    with pytest.raises(InvalidValue):  # refused after the op was recorded in the same write
        await store.run_write(
            taken.claim, RunWrite(ops_started=[("op-x", "bash")], events=[_span(), unrenderable])
        )
    assert await store.last_seq(session_id) == before
    retry = await store.run_write(taken.claim, RunWrite(ops_started=[("op-x", "bash")]))
    assert retry.started == {"op-x": None}
    assert await store.sandbox_lease(session_id) is None


async def test_a_run_that_ends_waiting_queues_one_for_input_that_came_meanwhile(
    store: SqlStore,
) -> None:
    """The answer was logged while the run was live (so its accept queued no
    run), after the log the run last read: ending with ``requeue_after`` queues
    the run that answers it, in the same commit; nothing is left waiting."""
    workspace_id, session_id = await new_session(store)
    accepted = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_hi")], ACCEPT_ALL, claim=_terms("brain")
    )
    assert accepted.started is not None
    claim = accepted.started.claim
    seen = await store.last_seq(session_id)
    answer = NewEvent("sevt_answer", "user.custom_tool_result", {"custom_tool_use_id": "x"})
    came = await store.accept_user_events(
        workspace_id, session_id, [answer], ACCEPT_ALL, claim=_terms("brain")
    )
    assert came.started is None and await store.queued_runs(session_id) == []
    ended = await store.run_write(
        claim,
        RunWrite(
            events=[_span("session.status_idle")],
            status=RunStatus.DONE,
            since=seen,
            answer_drained=False,
            requeue_after=seen,
        ),
    )
    assert ended.next_run is not None
    assert await store.queued_runs(session_id) == [(ended.next_run, session_id)]


async def test_a_run_that_ends_waiting_for_calls_answered_meanwhile_logs_no_wait(
    store: SqlStore,
) -> None:
    """The ``requires_action`` idle the run worked out from the log it read would
    name a call answered since: it is left out, and the run queued for the
    answer says what still waits. Before, it was logged, naming the answered call."""
    workspace_id, session_id = await new_session(store)
    accepted = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_hi")], ACCEPT_ALL, claim=_terms("brain")
    )
    assert accepted.started is not None
    seen = await store.last_seq(session_id)
    answer = NewEvent("sevt_answer", "user.custom_tool_result", {"custom_tool_use_id": "b"})
    await store.accept_user_events(workspace_id, session_id, [answer], ACCEPT_ALL)
    waiting = {"stop_reason": {"type": "requires_action", "event_ids": ["b"]}}
    ended = await store.run_write(
        accepted.started.claim,
        RunWrite(
            events=[
                _span("session.usage"),
                NewEvent(new_id("event"), "session.status_idle", waiting),
            ],
            status=RunStatus.DONE,
            since=seen,
            answer_drained=False,
            requeue_after=seen,
        ),
    )
    assert [e.type for e in ended.logged] == ["session.usage"]
    assert ended.next_run is not None


async def test_a_run_that_ends_waiting_with_nothing_new_queues_none(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    accepted = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_hi")], ACCEPT_ALL, claim=_terms("brain")
    )
    assert accepted.started is not None
    seen = await store.last_seq(session_id)
    ended = await store.run_write(
        accepted.started.claim,
        # since=0: the whole log read back (a runner whose log cache was
        # evicted); the message that started the run is not new input.
        RunWrite(status=RunStatus.DONE, since=0, answer_drained=False, requeue_after=seen),
    )
    assert ended.next_run is None and await store.queued_runs(session_id) == []


async def test_a_closing_write_leaves_out_answers_a_client_gave_meanwhile(
    store: SqlStore,
) -> None:
    """An interrupted run closes the calls it read as open; a custom tool's
    result accepted since keeps its place, and the call gets no second answer."""
    workspace_id, session_id = await new_session(store)
    accepted = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_hi")], ACCEPT_ALL, claim=_terms("brain")
    )
    assert accepted.started is not None
    claim = accepted.started.claim
    uses = [
        NewEvent(f"sevt_use{n}", "agent.custom_tool_use", {"name": "t", "input": {}})
        for n in range(2)
    ]
    await store.run_write(claim, RunWrite(events=uses))
    answer = NewEvent("sevt_answer", "user.custom_tool_result", {"custom_tool_use_id": "sevt_use0"})
    await store.accept_user_events(workspace_id, session_id, [answer], ACCEPT_ALL)
    closing = [
        NewEvent(f"sevt_closed{n}", "agent.tool_result", {"tool_use_id": f"sevt_use{n}"})
        for n in range(2)
    ]
    ended = await store.run_write(
        claim, RunWrite(events=closing, status=RunStatus.DONE, closing=True)
    )
    assert [e.id for e in ended.logged] == ["sevt_closed1"]
