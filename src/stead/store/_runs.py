"""Runs (one per turn of work) with leases and epochs, and the side-effect ledger.

A run is claimed by bumping its epoch; every later write on its behalf checks
that epoch in the same transaction (``check_epoch``), so a process that lost its
lease cannot append anything (DESIGN rule 4). The ledger (``ops``) records a side
effect as started before it runs and completed, with its result, in the same
transaction as the event that reports it (rule 5).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, insert, or_, select, update

from stead.ids import new_id
from stead.store import _events
from stead.store.base import (
    LIVE_RUN_STATUSES,
    EventRecord,
    OpRecord,
    RunClaim,
    RunStatus,
    RunWrite,
)
from stead.store.errors import LeaseLost
from stead.store.tables import ops, runs, sessions

OWNED = (RunStatus.RUNNING, RunStatus.RETRYING)


def start(conn: Connection, now: datetime, session_id: str) -> str:
    """The session's live run, or a new queued one (idempotent)."""
    live = conn.execute(
        select(runs.c.id)
        .where(
            runs.c.session_id == session_id,
            or_(*(runs.c.status == s for s in (*LIVE_RUN_STATUSES, RunStatus.RETRYING))),
        )
        .limit(1)
    ).scalar_one_or_none()
    if live is not None:
        return str(live)
    run_id = new_id("run")
    conn.execute(
        insert(runs).values(
            id=run_id,
            session_id=session_id,
            status=RunStatus.QUEUED,
            attempts=0,
            epoch=0,
            created_at=now,
            updated_at=now,
        )
    )
    return run_id


def claim(
    conn: Connection, now: datetime, run_id: str, owner: str, lease_seconds: float
) -> RunClaim | None:
    """Takes a queued run: a new epoch, one more attempt, a lease."""
    row = conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.status == RunStatus.QUEUED)
        .values(
            status=RunStatus.RUNNING,
            owner=owner,
            epoch=runs.c.epoch + 1,
            attempts=runs.c.attempts + 1,
            lease_until=now + timedelta(seconds=lease_seconds),
            updated_at=now,
        )
        .returning(runs.c.session_id, runs.c.epoch, runs.c.attempts)
    ).first()
    if row is None:
        return None
    return RunClaim(run_id, row.session_id, int(row.epoch), int(row.attempts))


def check_epoch(conn: Connection, run_id: str, epoch: int) -> None:
    row = conn.execute(select(runs.c.epoch, runs.c.status).where(runs.c.id == run_id)).first()
    if row is None or int(row.epoch) != epoch or row.status not in OWNED:
        raise LeaseLost(run_id, epoch)


def renew(conn: Connection, now: datetime, run_id: str, epoch: int, lease_seconds: float) -> bool:
    result = conn.execute(
        update(runs)
        .where(runs.c.id == run_id, runs.c.epoch == epoch, runs.c.status.in_(OWNED))
        .values(lease_until=now + timedelta(seconds=lease_seconds), updated_at=now)
    )
    return result.rowcount == 1


def set_status(conn: Connection, now: datetime, run_id: str, epoch: int, status: RunStatus) -> None:
    check_epoch(conn, run_id, epoch)
    conn.execute(update(runs).where(runs.c.id == run_id).values(status=status, updated_at=now))


def requeue(conn: Connection, now: datetime, *, not_owned_by: str | None) -> list[tuple[str, str]]:
    """Puts orphaned runs back in the queue: those whose lease expired, or (with
    ``not_owned_by``, when this process is known to be the only brain) every owned
    run of another owner."""
    stmt = select(runs.c.id, runs.c.session_id).where(runs.c.status.in_(OWNED))
    if not_owned_by is None:
        stmt = stmt.where(runs.c.lease_until < now)
    else:
        stmt = stmt.where(or_(runs.c.owner.is_(None), runs.c.owner != not_owned_by))
    orphans = [(r.id, r.session_id) for r in conn.execute(stmt).all()]
    for run_id, _ in orphans:
        conn.execute(
            update(runs)
            .where(runs.c.id == run_id)
            .values(status=RunStatus.QUEUED, owner=None, lease_until=None, updated_at=now)
        )
    return orphans


def queued(conn: Connection, session_id: str | None) -> list[tuple[str, str]]:
    stmt = select(runs.c.id, runs.c.session_id).where(runs.c.status == RunStatus.QUEUED)
    if session_id is not None:
        stmt = stmt.where(runs.c.session_id == session_id)
    rows = conn.execute(stmt.order_by(runs.c.created_at)).all()
    return [(r.id, r.session_id) for r in rows]


def _op(row: Any) -> OpRecord:
    return OpRecord(
        op_key=row.op_key,
        run_id=row.run_id,
        kind=row.kind,
        status=row.status,
        result=row.result,
        epoch=int(row.epoch),
    )


def get_op(conn: Connection, op_key: str) -> OpRecord | None:
    row = conn.execute(select(ops).where(ops.c.op_key == op_key)).first()
    return None if row is None else _op(row)


def op_started(
    conn: Connection,
    now: datetime,
    session_id: str,
    run_id: str,
    epoch: int,
    op_key: str,
    kind: str,
) -> None:
    if get_op(conn, op_key) is not None:
        return
    conn.execute(
        insert(ops).values(
            op_key=op_key,
            session_id=session_id,
            run_id=run_id,
            kind=kind,
            status="started",
            result=None,
            epoch=epoch,
            created_at=now,
            updated_at=now,
        )
    )


def op_completed(conn: Connection, now: datetime, op_key: str, result: Any) -> None:
    conn.execute(
        update(ops)
        .where(ops.c.op_key == op_key)
        .values(status="completed", result=result, updated_at=now)
    )


def finish(conn: Connection, now: datetime, run_id: str, status: RunStatus) -> None:
    """Sets a run's status without fencing (administrative use and tests)."""
    conn.execute(update(runs).where(runs.c.id == run_id).values(status=status, updated_at=now))


def write(
    conn: Connection, now: datetime, claim: RunClaim, change: RunWrite
) -> tuple[list[EventRecord], str | None]:
    check_epoch(conn, claim.run_id, claim.epoch)
    for op_key, kind in change.ops_started:
        op_started(conn, now, claim.session_id, claim.run_id, claim.epoch, op_key, kind)
    logged = _events.append_log(conn, now, claim.session_id, change.events)
    for op_key, result in change.ops_completed:
        op_completed(conn, now, op_key, result)
    if change.usage:
        add_usage(conn, claim.session_id, change.usage)
    next_run: str | None = None
    if change.status is not None:
        conn.execute(
            update(runs)
            .where(runs.c.id == claim.run_id)
            .values(status=change.status, updated_at=now, lease_until=None)
        )
    if change.drain_pending:
        drained = _events.drain(conn, now, claim.session_id)
        logged += drained
        if drained and change.answer_drained:
            next_run = start(conn, now, claim.session_id)
    return logged, next_run


def add_usage(conn: Connection, session_id: str, delta: dict[str, int]) -> None:
    current = conn.execute(
        select(sessions.c.usage).where(sessions.c.id == session_id)
    ).scalar_one_or_none()
    usage = dict(current or {})
    for key, value in delta.items():
        usage[key] = usage.get(key, 0) + value
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(usage=usage))
