"""Queries of the ``brains`` table (``brains.py`` says what a brain is)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update

from stead.store._runs import OWNED
from stead.store.base import RunStatus
from stead.store.brains import BrainRecord
from stead.store.tables import brains, runs


def register(
    conn: Connection, now: datetime, brain_id: str, host: str, machine: str, pid: int
) -> None:
    conn.execute(delete(brains).where(brains.c.id == brain_id))
    row = {"id": brain_id, "host": host, "machine": machine, "pid": pid}
    conn.execute(insert(brains).values(**row, started_at=now, heartbeat_at=now))


def heartbeat(conn: Connection, now: datetime, brain_id: str) -> bool:
    stmt = update(brains).where(brains.c.id == brain_id, brains.c.stopped_at.is_(None))
    return conn.execute(stmt.values(heartbeat_at=now)).rowcount > 0


def stop(conn: Connection, now: datetime, brain_id: str) -> None:
    conn.execute(update(brains).where(brains.c.id == brain_id).values(stopped_at=now))


def _record(row: Any) -> BrainRecord:
    return BrainRecord(
        id=row.id,
        host=row.host,
        machine=row.machine,
        pid=int(row.pid),
        started_at=row.started_at,
        heartbeat_at=row.heartbeat_at,
        stopped_at=row.stopped_at,
    )


def list_(conn: Connection) -> list[BrainRecord]:
    rows = conn.execute(select(brains).order_by(brains.c.started_at.desc(), brains.c.id))
    return [_record(row) for row in rows]


def requeue_dead(
    conn: Connection,
    now: datetime,
    stale_seconds: float,
    machine: str,
    alive: Callable[[int], bool],
    prune_after_seconds: float,
) -> list[tuple[str, str]]:
    dead = dead_brains(list_(conn), now, stale_seconds, machine, alive)
    if not dead:
        return []
    # The runs' own conditions are checked again as each row is updated, so a
    # run claimed meanwhile by a live brain is left alone.
    stmt = (
        update(runs)
        .where(runs.c.status.in_(OWNED), runs.c.owner.in_([b.id for b in dead]))
        .values(status=RunStatus.QUEUED, owner=None, lease_until=None, updated_at=now)
        .returning(runs.c.id, runs.c.session_id)
    )
    found = [(r.id, r.session_id) for r in conn.execute(stmt).all()]
    gone = prunable(dead, now, prune_after_seconds)
    if gone:
        conn.execute(delete(brains).where(brains.c.id.in_(gone)))
    return found


def dead_brains(
    among: Sequence[BrainRecord],
    now: datetime,
    stale_seconds: float,
    machine: str,
    alive: Callable[[int], bool],
) -> list[BrainRecord]:
    """The brains of ``among`` that are dead: stopped, silent for ``stale_seconds``,
    or on ``machine`` with a pid ``alive`` denies."""
    stale = now - timedelta(seconds=stale_seconds)
    return [
        b
        for b in among
        if b.stopped_at is not None
        or b.heartbeat_at < stale
        or (b.machine == machine and not alive(b.pid))
    ]


def prunable(dead: Sequence[BrainRecord], now: datetime, after_seconds: float) -> list[str]:
    """The ids of the ``dead`` brains whose rows go: dead for ``after_seconds``."""
    horizon = now - timedelta(seconds=after_seconds)
    return [b.id for b in dead if (b.stopped_at or b.heartbeat_at) < horizon]
