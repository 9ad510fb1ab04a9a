"""Usage, budgets and termination in the SQL store, on SQLite and PostgreSQL:
what a run write adds, the budget gate, sandbox time booked once, the ledger,
and a terminated session's end."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

from stead.ids import new_id
from stead.store import (
    BudgetReached,
    ClaimTerms,
    Conflict,
    NewEvent,
    RequestUsage,
    RunClaim,
    RunStatus,
    RunWrite,
    SqlStore,
    open_store,
)
from tests.databases import STORES
from tests.unit.conftest import definition, user_message

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
ACCEPT_ALL = lambda _session, _lookup: None  # noqa: E731
BUDGET = {"type": "limit", "max_list_cost": {"amount": "50", "currency": "USD"}}
"""50 cents: 500,000,000 nano-USD."""


async def _session(store: SqlStore, budget: Any = None) -> tuple[str, str]:
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())
    env = await store.create_environment(workspace.id, "env", None, {"type": "cloud"}, {}, None)
    session, _ = await store.create_session(
        workspace.id, (agent.id, None), lambda a: {"id": a.id}, env.id, {"budget": budget}, []
    )
    return workspace.id, session.id


async def _claim(store: SqlStore, session_id: str) -> RunClaim:
    await store.start_run(session_id)
    terms = ClaimTerms(owner="brain", lease_seconds=30.0, opening=lambda _a: [])
    taken = await store.claim_next(session_id, terms)
    assert taken is not None
    return taken.claim


def _used(cost_nanos: int, tokens: int = 10) -> RequestUsage:
    counters = {"input_tokens": tokens, "output_tokens": tokens, "requests": 1}
    return RequestUsage("claude-sonnet-4-6", {**counters, "list_cost_nanos": cost_nanos})


def _event(kind: str, body: dict[str, Any] | None = None) -> NewEvent:
    return NewEvent(new_id("event"), kind, body or {})


async def test_a_run_write_adds_usage_to_the_session_and_the_ledger(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store)
    claim = await _claim(store, session_id)
    for _ in range(2):
        await store.run_write(claim, RunWrite(events=[_event("span")], usage=_used(7, 100)))
    usage = (await store.get_session(workspace_id, session_id)).usage
    assert (usage["input_tokens"], usage["requests"], usage["list_cost_nanos"]) == (200, 2, 14)
    [row] = await store.usage_ledger(workspace_id)
    assert (row.session_id, row.model, row.counters["requests"]) == (
        session_id,
        "claude-sonnet-4-6",
        2,
    )
    assert row.counters["list_cost_nanos"] == 14
    today = datetime.now(UTC).date()
    assert await store.usage_ledger(workspace_id, today + timedelta(days=1)) == []


async def test_the_budget_gate_writes_nothing_once_the_budget_is_reached(store: SqlStore) -> None:
    _, session_id = await _session(store, BUDGET)
    claim = await _claim(store, session_id)
    gated = RunWrite(events=[_event("span.model_request_start")], budget_gate=True)
    await store.run_write(claim, gated)  # nothing spent yet
    await store.run_write(claim, RunWrite(usage=_used(500_000_000)))
    before = await store.last_seq(session_id)
    with pytest.raises(BudgetReached):
        await store.run_write(claim, gated)
    assert await store.last_seq(session_id) == before


async def test_raising_the_budget_resumes_a_session_stopped_at_it(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store, BUDGET)
    claim = await _claim(store, session_id)
    stop = {"stop_reason": {"type": "budget_reached"}}
    await store.run_write(
        claim,
        RunWrite(
            events=[_event("session.status_idle", stop)],
            usage=_used(600_000_000),
            status=RunStatus.DONE,
        ),
    )
    raised = {"type": "limit", "max_list_cost": {"amount": "100", "currency": "USD"}}
    updated, _ = await store.update_session(
        workspace_id, session_id, lambda _s: {"budget": raised}, _event("session.updated")
    )
    assert updated.status == "running"
    assert len(await store.queued_runs(session_id)) == 1


async def test_at_the_budget_an_interrupt_is_accepted_and_left_out_of_the_log(
    store: SqlStore,
) -> None:
    workspace_id, session_id = await _session(store, BUDGET)
    below = await store.accept_user_events(
        workspace_id, session_id, [_event("user.interrupt")], ACCEPT_ALL
    )
    assert [e.type for e in below.logged] == ["user.interrupt"]
    claim = await _claim(store, session_id)
    await store.run_write(claim, RunWrite(usage=_used(500_000_000), status=RunStatus.DONE))
    before = await store.last_seq(session_id)
    interrupt, outcome = _event("user.interrupt"), _event("user.tool_confirmation")
    at_cap = await store.accept_user_events(
        workspace_id, session_id, [interrupt, outcome], ACCEPT_ALL
    )
    assert [e.id for e in at_cap.echoes] == [outcome.id]
    assert await store.last_seq(session_id) == before + 1


async def test_a_turn_running_past_the_budget_takes_an_interrupt(store: SqlStore) -> None:
    """Its last model request crossed the cap and its tools still run: the
    interrupt is what stops them, so it is logged as any other."""
    workspace_id, session_id = await _session(store, BUDGET)
    await store.run_write(await _claim(store, session_id), RunWrite(usage=_used(500_000_000)))
    interrupt = _event("user.interrupt")
    running = await store.accept_user_events(workspace_id, session_id, [interrupt], ACCEPT_ALL)
    assert [e.id for e in running.logged] == [interrupt.id]


@pytest.mark.sql
async def test_sandbox_time_is_booked_once_up_to_the_hosts_count(
    store: SqlStore, database_url: str
) -> None:
    workspace_id, session_id = await _session(store)
    others = [await open_store(database_url) for _ in range(2)]
    try:
        async with anyio.create_task_group() as group:
            for each in [store, *others, store]:
                group.start_soon(
                    lambda s: s.book_sandbox_active_seconds(
                        session_id, session_id=session_id, workspace_id=workspace_id, total=12.5
                    ),
                    each,
                )
    finally:
        for other in others:
            await other.close()
    assert await store.sandbox_active_seconds(session_id) == 12.5
    added = await store.book_sandbox_active_seconds(
        session_id, session_id=session_id, workspace_id=workspace_id, total=20.0
    )
    assert added == 7.5
    assert (await store.get_session(workspace_id, session_id)).usage["active_seconds"] == 20.0
    [row] = await store.usage_ledger(workspace_id)
    assert (row.model, row.active_seconds, row.counters["requests"]) == (None, 20.0, 0)


async def test_a_terminating_write_ends_the_session_for_good(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store)
    claim = await _claim(store, session_id)
    queued = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_late")], ACCEPT_ALL
    )
    assert queued.echoes[0].seq is None  # the run is live: it waits in the queue
    error = {"error": {"type": "unknown_error", "retry_status": {"type": "terminal"}}}
    done = await store.run_write(
        claim,
        RunWrite(
            events=[_event("session.error", error)],
            status=RunStatus.FAILED,
            drain_pending=True,
            answer_drained=False,
            terminate=True,
        ),
    )
    assert [e.type for e in done.logged] == [
        "session.error",
        "user.message",
        "session.status_terminated",
    ]
    assert done.next_run is None
    ended = await store.get_session(workspace_id, session_id)
    assert ended.status == "terminated" and ended.terminated_at is not None
    with pytest.raises(Conflict, match="terminated"):
        await store.accept_user_events(
            workspace_id, session_id, [user_message("sevt_after")], ACCEPT_ALL
        )


async def test_only_an_idle_session_is_terminated_on_request(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store)
    await store.start_run(session_id)
    with pytest.raises(Conflict, match="interrupt"):
        await store.terminate_session(workspace_id, session_id, [])
    [(run_id, _)] = await store.queued_runs(session_id)
    await store.finish_run(run_id, RunStatus.DONE)
    logged = await store.terminate_session(workspace_id, session_id, [])
    assert [e.type for e in logged] == ["session.status_terminated"]
    with pytest.raises(Conflict, match="terminated"):
        await store.terminate_session(workspace_id, session_id, [])


async def test_a_session_terminated_at_its_budget_logs_what_it_had_queued(
    store: SqlStore,
) -> None:
    """Queued while the turn ran, a message stays queued at the budget's pause;
    ended on request, the session logs it unanswered before its end, as a turn
    that terminates it does, instead of listing it after the end as still waiting."""
    workspace_id, session_id = await _session(store, BUDGET)
    claim = await _claim(store, session_id)
    queued = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_waiting")], ACCEPT_ALL
    )
    assert queued.echoes[0].seq is None
    await store.run_write(claim, RunWrite(usage=_used(500_000_000), status=RunStatus.DONE))
    logged = await store.terminate_session(workspace_id, session_id, [])
    assert logged[0].id == "sevt_waiting"
    assert [e.type for e in logged] == ["user.message", "session.status_terminated"]
    assert all(e.seq is not None and e.processed_at is not None for e in logged)


async def test_a_session_archived_at_its_budget_logs_what_it_had_queued(
    store: SqlStore,
) -> None:
    """Archived, a session takes no turn again: what waits in its queue at the
    budget's pause is logged unanswered, as a terminated session logs it,
    instead of listed for good as still waiting (processed_at null)."""
    workspace_id, session_id = await _session(store, BUDGET)
    claim = await _claim(store, session_id)
    await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_waiting")], ACCEPT_ALL
    )
    await store.run_write(claim, RunWrite(usage=_used(500_000_000), status=RunStatus.DONE))
    record, logged = await store.archive_session(workspace_id, session_id)
    assert record.archived_at is not None
    assert [(e.id, e.type) for e in logged] == [("sevt_waiting", "user.message")]
    assert all(e.seq is not None and e.processed_at is not None for e in logged)
    again, nothing = await store.archive_session(workspace_id, session_id)
    assert (again.archived_at, nothing) == (record.archived_at, [])


async def test_a_deleted_sessions_sandbox_time_stays_in_the_ledger(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store)
    await store.delete_session(workspace_id, session_id)
    await store.book_sandbox_active_seconds(
        session_id, session_id=session_id, workspace_id=workspace_id, total=3.0
    )
    [row] = await store.usage_ledger(workspace_id)
    assert (row.session_id, row.model, row.active_seconds) == (session_id, None, 3.0)
