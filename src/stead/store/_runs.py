"""Runs (one per turn of work) with leases and epochs, and the side-effect ledger.

A run is claimed by bumping its epoch; every later write on its behalf checks
that epoch in the same transaction (``check_epoch``), so a process that lost its
lease cannot append anything (DESIGN rule 4). The ledger (``ops``) records a side
effect as started before it runs and completed, with its result, in the same
transaction as the event that reports it (rule 5). The statements of a turn's
hot path run compiled (``_compiled.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Boolean, Connection, bindparam, case, insert, null, or_, select, update

from stead.events import EventType
from stead.ids import new_id
from stead.store import _answers, _events, _limits, _locks, _usage
from stead.store._compiled import compiled
from stead.store._leases import _insert
from stead.store.base import (
    LIVE_RUN_STATUSES,
    NewEvent,
    OpRecord,
    RunClaim,
    RunStatus,
    RunWrite,
    WriteResult,
)
from stead.store.errors import LeaseLost
from stead.store.tables import ops, runs

OWNED = (RunStatus.RUNNING, RunStatus.RETRYING)
NOT_DONE = (*LIVE_RUN_STATUSES, RunStatus.RETRYING)


def without_waits(new: Sequence[NewEvent]) -> list[NewEvent]:
    """``new`` less its ``requires_action`` idle: for a write whose run ends
    waiting while input came after the log it stepped on (``RunWrite.requeue_after``).
    The idle would name calls that input may answer; the run queued for the
    input decides what still waits."""
    return [e for e in new if not _awaits_input(e)]


def _awaits_input(event: NewEvent) -> bool:
    reason = event.body.get("stop_reason")
    return (
        event.type == EventType.SESSION_STATUS_IDLE
        and isinstance(reason, dict)
        and reason.get("type") == "requires_action"
    )


def status_in(statuses: Sequence[str]) -> Any:
    """Run status is one of ``statuses``, as an OR of equalities: an IN list would be
    re-expanded on every execution of a cached statement."""
    return or_(*(runs.c.status == s for s in statuses))


def _live_statement() -> Any:
    return (
        select(runs.c.id)
        .where(runs.c.session_id == bindparam("session_id"), status_in(NOT_DONE))
        .limit(1)
    )


def _insert_run() -> Any:
    return insert(runs).values(
        id=bindparam("b_id"),
        session_id=bindparam("b_session_id"),
        status=RunStatus.QUEUED,
        attempts=0,
        epoch=0,
        created_at=bindparam("b_now"),
        updated_at=bindparam("b_now"),
    )


def start(conn: Connection, now: datetime, session_id: str) -> str:
    """The session's live run, or a new queued one (idempotent)."""
    _locks.session(conn, session_id)  # two starts at once make one run
    live = compiled(conn, "runs.live", _live_statement).fetch(conn, {"session_id": session_id})
    if live:
        return str(live[0].id)
    run_id = new_id("run")
    compiled(conn, "runs.insert", _insert_run).execute(
        conn, {"b_id": run_id, "b_session_id": session_id, "b_now": now}
    ).close()
    return run_id


def _claim_statement() -> Any:
    return (
        update(runs)
        .where(runs.c.id == bindparam("b_id"), runs.c.status == RunStatus.QUEUED)
        .values(
            status=RunStatus.RUNNING,
            owner=bindparam("b_owner"),
            epoch=runs.c.epoch + 1,
            attempts=runs.c.attempts + 1,
            lease_until=bindparam("b_lease_until"),
            updated_at=bindparam("b_now"),
        )
        .returning(runs.c.session_id, runs.c.epoch, runs.c.attempts)
    )


def claim(
    conn: Connection, now: datetime, run_id: str, owner: str, lease_seconds: float
) -> RunClaim | None:
    """Takes a queued run: a new epoch, one more attempt, a lease."""
    values = {
        "b_id": run_id,
        "b_owner": owner,
        "b_lease_until": now + timedelta(seconds=lease_seconds),
        "b_now": now,
    }
    cursor = compiled(conn, "runs.claim", _claim_statement).execute(conn, values)
    row = cursor.fetchone()
    cursor.close()
    if row is None:
        return None
    return RunClaim(run_id, str(row[0]), int(row[1]), int(row[2]))


def _epoch_statement() -> Any:
    # Locked: a requeue or a claim of this run waits for the write it fences.
    return (
        select(runs.c.epoch, runs.c.status)
        .where(runs.c.id == bindparam("run_id"))
        .with_for_update()
    )


def check_epoch(conn: Connection, run_id: str, epoch: int) -> None:
    rows = compiled(conn, "runs.epoch", _epoch_statement).fetch(conn, {"run_id": run_id})
    if not rows or int(rows[0].epoch) != epoch or rows[0].status not in OWNED:
        raise LeaseLost(run_id, epoch)


def renew(conn: Connection, now: datetime, run_id: str, epoch: int, lease_seconds: float) -> bool:
    result = conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.epoch == epoch, runs.c.status.in_(OWNED))
        .values(lease_until=now + timedelta(seconds=lease_seconds), updated_at=now)
    )
    return result.rowcount == 1


def requeue(conn: Connection, now: datetime, *, not_owned_by: str | None) -> list[tuple[str, str]]:
    """Puts orphaned runs back in the queue: those whose lease expired, or (with
    ``not_owned_by``, when this process is known to be the only brain) every owned
    run of another owner."""
    # One statement: its conditions are checked again on each row as it is
    # updated, so a lease renewed by its owner meanwhile is left alone.
    stmt = update(runs).where(runs.c.status.in_(OWNED))
    if not_owned_by is None:
        # No lease on an owned run: a status write of before cleared it.
        stmt = stmt.where(or_(runs.c.lease_until < now, runs.c.lease_until.is_(None)))
    else:
        stmt = stmt.where(or_(runs.c.owner.is_(None), runs.c.owner != not_owned_by))
    stmt = stmt.values(status=RunStatus.QUEUED, owner=None, lease_until=None, updated_at=now)
    found = conn.execute(stmt.returning(runs.c.id, runs.c.session_id)).all()
    return [(r.id, r.session_id) for r in found]


def _queued_statement() -> Any:
    return (
        select(runs.c.id, runs.c.session_id)
        .where(runs.c.status == RunStatus.QUEUED, runs.c.session_id == bindparam("session_id"))
        .order_by(runs.c.created_at)
    )


def _oldest_queued_statement() -> Any:
    # A run another transaction is claiming is passed over, not waited for.
    return _queued_statement().limit(1).with_for_update(skip_locked=True)


def oldest_queued(conn: Connection, session_id: str) -> str | None:
    statement = compiled(conn, "runs.oldest_queued", _oldest_queued_statement)
    rows = statement.fetch(conn, {"session_id": session_id})
    return str(rows[0].id) if rows else None


def queued(conn: Connection, session_id: str | None) -> list[tuple[str, str]]:
    """Queued runs, oldest first; of one session (the hot path, compiled) or all."""
    if session_id is not None:
        statement = compiled(conn, "runs.queued", _queued_statement)
        rows = statement.fetch(conn, {"session_id": session_id})
    else:
        stmt = select(runs.c.id, runs.c.session_id).where(runs.c.status == RunStatus.QUEUED)
        rows = list(conn.execute(stmt.order_by(runs.c.created_at)).all())
    return [(r.id, r.session_id) for r in rows]


def _op(row: Any) -> OpRecord:
    return OpRecord(
        op_key=row.op_key,
        run_id=row.run_id,
        kind=row.kind,
        status=row.status,
        result=row.result,
        epoch=int(row.epoch),
        placement=None if row.placement is None else int(row.placement),
    )


def _get_op_statement() -> Any:
    return select(ops).where(ops.c.op_key == bindparam("op_key"))


def get_op(conn: Connection, op_key: str) -> OpRecord | None:
    rows = compiled(conn, "ops.get", _get_op_statement).fetch(conn, {"op_key": op_key})
    return _op(rows[0]) if rows else None


def op_started(
    conn: Connection,
    now: datetime,
    session_id: str,
    run_id: str,
    epoch: int,
    op_key: str,
    kind: str,
    placement: int | None = None,
) -> OpRecord | None:
    """Records the op as started (at the sandbox's ``placement``) unless the ledger
    has it; returns what it had. A new op, the usual case, takes one statement."""
    row = {
        "op_key": op_key,
        "session_id": session_id,
        "run_id": run_id,
        "kind": kind,
        "status": "started",
        "result": None,
        "epoch": epoch,
        "placement": placement,
        "created_at": now,
        "updated_at": now,
    }
    cursor = compiled(conn, "ops.insert_new", lambda: _insert_op_statement(conn)).execute(conn, row)
    try:
        # Whether the row went in, from RETURNING (as ``_idempotency`` reads it).
        inserted = cursor.fetchone() is not None
    finally:
        cursor.close()
    return None if inserted else get_op(conn, op_key)


def _insert_op_statement(conn: Connection) -> Any:
    """An op row from bind parameters named like its columns, unless one has its key."""
    columns: dict[str, Any] = {c.name: bindparam(c.name) for c in ops.columns}
    new = _insert(conn, ops).values(columns)
    return new.on_conflict_do_nothing(index_elements=["op_key"]).returning(ops.c.op_key)


def _complete_statement() -> Any:
    return (
        update(ops)
        .where(ops.c.op_key == bindparam("b_op_key"))
        .values(status="completed", result=bindparam("b_result"), updated_at=bindparam("b_now"))
    )


def op_completed(conn: Connection, now: datetime, op_key: str, result: Any) -> None:
    values = {"b_op_key": op_key, "b_result": result, "b_now": now}
    compiled(conn, "ops.complete", _complete_statement).execute(conn, values).close()


def finish(conn: Connection, now: datetime, run_id: str, status: RunStatus) -> None:
    """Sets a run's status without fencing (administrative use and tests)."""
    conn.execute(update(runs).where(runs.c.id == run_id).values(status=status, updated_at=now))


def _status_statement() -> Any:
    """A run's new status; its lease ends with its ownership (an owned status
    keeps it: an owned run without one would never be taken back)."""
    return (
        update(runs)
        .where(runs.c.id == bindparam("b_id"))
        .values(
            status=bindparam("b_status"),
            updated_at=bindparam("b_now"),
            lease_until=case(
                (bindparam("b_owned", type_=Boolean), runs.c.lease_until), else_=null()
            ),
        )
    )


def write(conn: Connection, now: datetime, claim: RunClaim, change: RunWrite) -> WriteResult:
    _locks.session(conn, claim.session_id)  # before the run's row (``_locks`` order)
    check_epoch(conn, claim.run_id, claim.epoch)
    return write_claimed(conn, now, claim, change)


def write_claimed(
    conn: Connection, now: datetime, claim: RunClaim, change: RunWrite
) -> WriteResult:
    """``write`` for the transaction that has just claimed the run (and so holds
    its session's lock): its epoch is this transaction's own, so there is no
    fence to check."""
    if change.budget_gate:
        _limits.gate_model_request(conn, now, claim.session_id)
    lease = None
    if (terms := change.lease) is not None:
        lease = _limits.acquire_lease(
            conn,
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
        op_key: op_started(
            conn, now, claim.session_id, claim.run_id, claim.epoch, op_key, kind, placement
        )
        for op_key, kind in change.ops_started
    }
    new = change.events
    if change.closing:
        new = _answers.unanswered(
            new, lambda use_id: _answers.logged_answer(conn, claim.session_id, use_id)
        )
    # Input that starts work, logged while the run was live (so its accept
    # queued no run), after the log the run stepped on: read before this
    # write logs anything of its own.
    after = change.requeue_after
    came = after is not None and _events.work_logged_after(conn, claim.session_id, after)
    if came:
        new = without_waits(new)
    logged = _events.append_log(conn, now, claim.session_id, new)
    for op_key, result in change.ops_completed:
        op_completed(conn, now, op_key, result)
    if change.usage is not None:
        _usage.add(conn, now, claim.session_id, change.usage.model, change.usage.counters)
    if change.sandbox_seconds is not None:
        _usage.book_session_sandbox(conn, now, claim.session_id, change.sandbox_seconds)
    next_run: str | None = None
    if change.status is not None:
        values = {
            "b_id": claim.run_id,
            "b_status": change.status,
            "b_now": now,
            "b_owned": change.status in OWNED,
        }
        compiled(conn, "runs.status", _status_statement).execute(conn, values).close()
    if change.drain_pending:
        answer = change.answer_drained or (
            change.answer_after_interrupt and _events.queued_after_interrupt(conn, claim.session_id)
        )
        drained = _events.drain(conn, now, claim.session_id)
        logged += drained
        if drained and answer:
            next_run = start(conn, now, claim.session_id)
    if change.terminate:
        logged += _events.terminate(conn, now, claim.session_id)
    log = None
    if change.since is not None:
        log = _events.log_after(conn, claim.session_id, change.since, logged)
    if came and next_run is None:
        next_run = start(conn, now, claim.session_id)
    return WriteResult(logged, next_run, log, started, lease)
