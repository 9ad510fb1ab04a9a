"""Runs, claims, fenced writes and the side-effect ledger in memory (``_runs.py``
and ``_claims.py``'s rules). A claim bumps the run's epoch; ``write`` checks it
first and raises ``LeaseLost`` when the run moved on, so a stale owner writes
nothing (the store puts the tables back when a write raises)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from stead.ids import new_id
from stead.store import _claims
from stead.store._answers import unanswered
from stead.store._runs import NOT_DONE, OWNED, without_waits
from stead.store.errors import LeaseLost, NotFound
from stead.store.events import EventRecord
from stead.store.inmemory import events, leases, limits, sessions
from stead.store.inmemory.tables import OpRow, RunRow, Tables, loaded, stored
from stead.store.runs import (
    ClaimTerms,
    OpRecord,
    RunClaim,
    RunStart,
    RunStatus,
    RunWrite,
    WriteResult,
)
from stead.store.sessions import SessionRecord


def start(t: Tables, now: datetime, session_id: str) -> str:
    """The session's live run, or a new queued one (idempotent)."""
    if session_id not in t.sessions:
        raise NotFound("session", session_id)
    for run in t.runs.values():
        if run.session_id == session_id and run.status in NOT_DONE:
            return run.id
    run = RunRow(new_id("run"), session_id, RunStatus.QUEUED, 0, 0, None, None, now, now)
    t.runs[run.id] = run
    return run.id


def finish(t: Tables, now: datetime, run_id: str, status: RunStatus) -> None:
    if run_id in t.runs:
        t.runs[run_id] = replace(t.runs[run_id], status=status, updated_at=now)


def _take(
    t: Tables, now: datetime, run_id: str, owner: str, lease_seconds: float
) -> RunClaim | None:
    run = t.runs.get(run_id)
    if run is None or run.status != RunStatus.QUEUED:
        return None
    run = replace(
        run,
        status=RunStatus.RUNNING,
        owner=owner,
        epoch=run.epoch + 1,
        attempts=run.attempts + 1,
        lease_until=now + timedelta(seconds=lease_seconds),
        updated_at=now,
    )
    t.runs[run_id] = run
    return RunClaim(run_id, run.session_id, run.epoch, run.attempts)


def claim(
    t: Tables,
    now: datetime,
    run_id: str,
    terms: ClaimTerms,
    session: SessionRecord | None = None,
    appended: Sequence[EventRecord] = (),
) -> RunStart | None:
    """``_claims.claim``: takes the run, logs its opening, and makes its first write."""
    taken = _take(t, now, run_id, terms.owner, terms.lease_seconds)
    if taken is None:
        return None
    opened = events.append_log(t, now, taken.session_id, terms.opening(taken.attempts))
    if session is None:
        session = sessions.snapshot(t, taken.session_id)
    session = replace(session, status="running")
    log = events.log_after(t, taken.session_id, terms.since, [*appended, *opened])
    first = None
    if terms.plan is not None and limits.allows_model_request(t, now, session.workspace_id):
        first = terms.plan(taken, session, log)
    if first is not None:
        done = write_claimed(t, now, taken, replace(first, since=None))
        opened += done.logged
        log = [*log, *done.logged]
    lease = t.leases.get(taken.session_id)
    return RunStart(taken, opened, session, terms.since, log, lease)


def claim_next(t: Tables, now: datetime, session_id: str, terms: ClaimTerms) -> RunStart | None:
    queued_runs = queued(t, session_id)
    return None if not queued_runs else claim(t, now, queued_runs[0][0], terms)


def renew(t: Tables, now: datetime, run_id: str, epoch: int, lease_seconds: float) -> bool:
    run = t.runs.get(run_id)
    if run is None or run.epoch != epoch or run.status not in OWNED:
        return False
    until = now + timedelta(seconds=lease_seconds)
    t.runs[run_id] = replace(run, lease_until=until, updated_at=now)
    return True


def requeue(t: Tables, now: datetime, not_owned_by: str | None) -> list[tuple[str, str]]:
    """Orphaned runs back in the queue: their lease expired, or (``not_owned_by``)
    another owner holds them."""
    found = []
    for run in list(t.runs.values()):
        if run.status not in OWNED:
            continue
        if not_owned_by is None:
            orphaned = run.lease_until is None or run.lease_until < now
        else:
            orphaned = run.owner is None or run.owner != not_owned_by
        if orphaned:
            t.runs[run.id] = replace(
                run, status=RunStatus.QUEUED, owner=None, lease_until=None, updated_at=now
            )
            found.append((run.id, run.session_id))
    return found


def queued(t: Tables, session_id: str | None) -> list[tuple[str, str]]:
    waiting = [
        run
        for run in t.runs.values()
        if run.status == RunStatus.QUEUED and session_id in (None, run.session_id)
    ]
    return [(run.id, run.session_id) for run in sorted(waiting, key=lambda r: r.created_at)]


def _op_started(
    t: Tables, claim: RunClaim, op_key: str, kind: str, placement: int | None
) -> OpRecord | None:
    previous = t.ops.get(op_key)
    if previous is not None:
        return OpRecord(
            previous.op_key,
            previous.run_id,
            previous.kind,
            previous.status,
            loaded(previous.result),
            previous.epoch,
            previous.placement,
        )
    started = OpRow(
        op_key, claim.session_id, claim.run_id, kind, "started", "null", claim.epoch, placement
    )
    t.ops[op_key] = started
    return None


def write(t: Tables, now: datetime, claim: RunClaim, change: RunWrite) -> WriteResult:
    """``_claims.write``: the run's write, then the one ``change.then`` works out."""
    run = t.runs.get(claim.run_id)
    if run is None or run.epoch != claim.epoch or run.status not in OWNED:
        raise LeaseLost(claim.run_id, claim.epoch)
    done = write_claimed(t, now, claim, replace(change, then=None))
    return _claims.followed(
        claim,
        change,
        done,
        lambda: sessions.snapshot(t, claim.session_id),
        lambda workspace_id: limits.allows_model_request(t, now, workspace_id),
        lambda planned: write_claimed(t, now, claim, planned),
    )


def write_claimed(t: Tables, now: datetime, claim: RunClaim, change: RunWrite) -> WriteResult:
    session_id = claim.session_id
    if change.budget_gate:
        limits.gate_model_request(t, now, session_id)
    lease = None
    if (terms := change.lease) is not None:
        limits.check_sandbox(t, now, terms.workspace_id, terms.sandbox_id, terms.session_id)
        lease = leases.acquire(
            t,
            now,
            terms.sandbox_id,
            terms.workspace_id,
            terms.session_id,
            terms.environment_id,
            terms.agent_id,
            terms.ttl_seconds,
            terms.host,
        )
    placement = lease.placement if lease is not None else None
    started = {
        op_key: _op_started(t, claim, op_key, kind, placement)
        for op_key, kind in change.ops_started
    }
    new = change.events
    if change.closing:
        new = unanswered(new, lambda use_id: events.logged_answer(t, session_id, use_id))
    after = change.requeue_after  # as ``_runs.write_claimed`` reads it
    came = after is not None and events.work_logged_after(t, session_id, after)
    if came:
        new = without_waits(new)
    logged = events.append_log(t, now, session_id, new)
    for op_key, result in change.ops_completed:
        _op_completed(t, op_key, result)
    if change.usage is not None:
        leases.add_usage(t, now, session_id, change.usage.model, change.usage.counters)
    if change.sandbox_seconds is not None:
        leases.book_session_sandbox(t, now, session_id, change.sandbox_seconds)
    if change.status is not None and claim.run_id in t.runs:
        run = t.runs[claim.run_id]
        until = run.lease_until if change.status in OWNED else None
        t.runs[claim.run_id] = replace(run, status=change.status, lease_until=until, updated_at=now)
    next_run = None
    if change.drain_pending:
        answer = change.answer_drained or (
            change.answer_after_interrupt and events.queued_after_interrupt(t, session_id)
        )
        drained = events.drain(t, now, session_id)
        logged += drained
        if drained and answer:
            next_run = start(t, now, session_id)
    if change.terminate:
        logged += events.terminate(t, now, session_id)
    log = None if change.since is None else events.log_after(t, session_id, change.since, logged)
    if came and next_run is None:
        next_run = start(t, now, session_id)
    return WriteResult(logged, next_run, log, started, lease)


def _op_completed(t: Tables, op_key: str, result: Any) -> None:
    if op_key in t.ops:
        t.ops[op_key] = replace(t.ops[op_key], status="completed", result=stored(result))
