"""Sandbox leases (DESIGN rule 9) and each sandbox's cumulative active time.

A lease binds a deterministic sandbox id to what the sandbox serves. Acquire
inserts with ON CONFLICT DO NOTHING and then reads the row under a row lock, so
any number of concurrent acquires of one id, from any connection or process,
leave exactly one row. Expiry conditions are read from the sessions and
environments rows themselves (``terminated_at`` or ``archived_at``, a deleted row),
never copied into the lease, so they cannot go stale.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, or_, select, update

from stead.store._compiled import compiled
from stead.store.errors import Conflict, SandboxLeaseEnded
from stead.store.leases import (
    REPLACEABLE_EXPIRIES,
    LeaseExpiry,
    LeaseHost,
    SandboxLease,
    SandboxLeaseStatus,
)
from stead.store.tables import environments, sandbox_leases, sandbox_usage, sessions

ACTIVE = SandboxLeaseStatus.ACTIVE
EXPIRED = SandboxLeaseStatus.EXPIRED
leases = sandbox_leases.c


def _insert(conn: Connection, table: Table) -> Any:
    """An INSERT that can carry the dialect's ON CONFLICT clause (both dialects have one)."""
    # Imported here: a SQLite server never loads the PostgreSQL dialect.
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)
    from sqlalchemy.dialects import sqlite

    return sqlite.insert(table)


def added_on_conflict(conn: Connection, table: Table, keys: list[str], grown: list[str]) -> Any:
    """INSERT of one row of ``table`` from bind parameters named like its columns
    that, when the row with its ``keys`` exists, adds to its ``grown`` columns."""
    insert = _insert(conn, table).values({c.name: bindparam(c.name) for c in table.columns})
    added = {name: table.c[name] + insert.excluded[name] for name in grown}
    return insert.on_conflict_do_update(
        index_elements=keys, set_={**added, "updated_at": insert.excluded.updated_at}
    )


def check_amount(name: str, value: float, *, allow_zero: bool) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "above zero"
        raise ValueError(f"{name} must be a finite number {bound}, not {value!r}")


def _record(row: Any) -> SandboxLease:
    return SandboxLease(
        sandbox_id=row.sandbox_id,
        workspace_id=row.workspace_id,
        session_id=row.session_id,
        environment_id=row.environment_id,
        agent_id=row.agent_id,
        status=SandboxLeaseStatus(row.status),
        expiry_reason=None if row.expiry_reason is None else LeaseExpiry(row.expiry_reason),
        ttl_seconds=float(row.ttl_seconds),
        created_at=row.created_at,
        last_activity_at=row.last_activity_at,
        expires_at=row.expires_at,
        expired_at=row.expired_at,
        destroyed_at=row.destroyed_at,
        host_id=row.host_id,
        host_address=row.host_address,
        placement=int(row.placement),
    )


# Every tool call renews its session's lease (``acquire``) and every turn with a
# sandbox books its time (``add_active_seconds``): their statements are compiled
# (``_compiled.py``), which took a renewal's work from 650 to 80 us.


def _locked(conn: Connection, sandbox_id: str) -> SandboxLease | None:
    """The lease, row-locked until commit on PostgreSQL (SQLite's write lock covers it)."""
    statement = compiled(
        conn,
        "sandbox_leases.locked",
        lambda: (
            select(sandbox_leases)
            .where(leases.sandbox_id == bindparam("sandbox_id"))
            .with_for_update()
        ),
    )
    rows = statement.fetch(conn, {"sandbox_id": sandbox_id})
    return _record(rows[0]) if rows else None


def _session_ended_statement() -> Any:
    return select(sessions.c.terminated_at, sessions.c.archived_at).where(
        sessions.c.id == bindparam("session_id"),
        sessions.c.workspace_id == bindparam("workspace_id"),
    )


def _archived_statement() -> Any:
    return select(environments.c.archived_at).where(
        environments.c.id == bindparam("environment_id"),
        environments.c.workspace_id == bindparam("workspace_id"),
    )


def _ended_reason(
    conn: Connection, workspace_id: str, session_id: str | None, environment_id: str
) -> LeaseExpiry | None:
    """The condition that rules the sandbox out now, if one holds."""
    if session_id is not None:
        found = compiled(conn, "sessions.ended_at", _session_ended_statement).fetch(
            conn, {"session_id": session_id, "workspace_id": workspace_id}
        )
        if not found:
            return LeaseExpiry.SESSION_DELETED
        if found[0].terminated_at is not None:
            return LeaseExpiry.SESSION_TERMINATED
        if found[0].archived_at is not None:
            return LeaseExpiry.SESSION_ARCHIVED
    environment = compiled(conn, "environments.archived_at", _archived_statement).fetch(
        conn, {"environment_id": environment_id, "workspace_id": workspace_id}
    )
    if not environment or environment[0].archived_at is not None:
        return LeaseExpiry.ENVIRONMENT_ARCHIVED
    return None


def _set(conn: Connection, sandbox_id: str, values: dict[str, Any]) -> None:
    """Sets ``values`` (column -> value) on the lease; one compiled statement per
    set of columns (a renewal, a lease taken again, ...)."""
    columns = tuple(sorted(values))

    def statement() -> Any:
        changed: dict[str, Any] = {column: bindparam(f"b_{column}") for column in columns}
        return update(sandbox_leases).where(leases.sandbox_id == bindparam("b_id")).values(changed)

    bound = {f"b_{column}": value for column, value in values.items()}
    set_ = compiled(conn, "sandbox_leases.set:" + ",".join(columns), statement)
    set_.execute(conn, {"b_id": sandbox_id, **bound}).close()


def _insert_statement(conn: Connection) -> Any:
    """A lease row from bind parameters named like its columns, unless one is there."""
    columns: dict[str, Any] = {c.name: bindparam(c.name) for c in sandbox_leases.columns}
    insert = _insert(conn, sandbox_leases).values(columns)
    return insert.on_conflict_do_nothing(index_elements=["sandbox_id"]).returning(leases.sandbox_id)


def fresh(now: datetime, ttl_seconds: float) -> dict[str, Any]:
    """The columns of a lease that starts now."""
    return {
        "status": ACTIVE,
        "expiry_reason": None,
        "ttl_seconds": ttl_seconds,
        "created_at": now,
        "last_activity_at": now,
        "expires_at": now + timedelta(seconds=ttl_seconds),
        "expired_at": None,
        "destroyed_at": None,
    }


UNPLACED: Mapping[str, Any] = MappingProxyType(
    {"host_id": None, "host_address": None, "placement": 0}
)
"""The host columns of a lease no host holds a sandbox for (as the table's defaults)."""


def placed(host: LeaseHost | None, placement: int) -> dict[str, Any]:
    """The columns of a lease that records ``host`` as holding its sandbox from
    now on, after ``placement`` placements before (none for no host)."""
    if host is None:
        return {}
    return {"host_id": host.host_id, "host_address": host.address, "placement": placement + 1}


def acquire(
    conn: Connection,
    now: datetime,
    sandbox_id: str,
    workspace_id: str,
    session_id: str | None,
    environment_id: str,
    agent_id: str | None,
    ttl_seconds: float,
    host: LeaseHost | None = None,
) -> SandboxLease:
    """Renews the active lease, creates it, or replaces one that ended by TTL or
    explicitly; raises ``SandboxLeaseEnded`` (writing nothing) otherwise. A lease
    that records no host records ``host``."""
    check_amount("ttl_seconds", ttl_seconds, allow_zero=False)
    ended = _ended_reason(conn, workspace_id, session_id, environment_id)
    if ended is not None:
        raise SandboxLeaseEnded(sandbox_id, ended)
    owner = {
        "workspace_id": workspace_id,
        "session_id": session_id,
        "environment_id": environment_id,
        "agent_id": agent_id,
    }
    row = {"sandbox_id": sandbox_id, **owner, **fresh(now, ttl_seconds), **UNPLACED}
    cursor = compiled(conn, "sandbox_leases.insert", lambda: _insert_statement(conn)).execute(
        conn, {**row, **placed(host, 0)}
    )
    # Told by RETURNING, never the row count: psycopg reports -1 for every INSERT.
    made = cursor.fetchone() is not None
    cursor.close()
    current = _locked(conn, sandbox_id)
    assert current is not None, "inserted or already there"
    if made:
        return current
    values = taken_again(current, owner, now, ttl_seconds, host)
    _set(conn, sandbox_id, values)
    return dataclasses.replace(current, **values)


def taken_again(
    current: SandboxLease,
    owner: dict[str, Any],
    now: datetime,
    ttl_seconds: float,
    host: LeaseHost | None = None,
) -> dict[str, Any]:
    """What acquiring the existing lease ``current`` for ``owner`` changes: an
    active one is renewed, one that ended by TTL or explicitly starts again;
    any other ended for good (``SandboxLeaseEnded``). The host it records stays
    (an expired sandbox not destroyed yet is still there); one that records
    none takes ``host``."""
    if current.workspace_id != owner["workspace_id"]:
        raise Conflict(f"sandbox {current.sandbox_id} belongs to another workspace")
    where = placed(host, current.placement) if current.host_id is None else {}
    if current.status == ACTIVE:
        return {
            "ttl_seconds": ttl_seconds,
            "last_activity_at": now,
            "expires_at": now + timedelta(seconds=ttl_seconds),
            **where,
        }
    if current.expiry_reason in REPLACEABLE_EXPIRIES:
        return {**owner, **fresh(now, ttl_seconds), **where}
    raise SandboxLeaseEnded(current.sandbox_id, str(current.expiry_reason))


def move(
    conn: Connection, _now: datetime, sandbox_id: str, placement: int, host: LeaseHost
) -> SandboxLease | None:
    """Records ``host`` if the active lease is still at ``placement``; the lease after."""
    current = _locked(conn, sandbox_id)
    if current is None or current.status != ACTIVE:
        return None
    values = moved_to(current, placement, host)
    if values:
        conn.execute(update(sandbox_leases).where(leases.sandbox_id == sandbox_id).values(**values))
    return dataclasses.replace(current, **values)


def moved_to(current: SandboxLease, placement: int, host: LeaseHost) -> dict[str, Any]:
    """What moving the active lease ``current`` from ``placement`` to ``host``
    changes: nothing when it was moved since (the caller follows where it went)."""
    return placed(host, placement) if current.placement == placement else {}


def renew(conn: Connection, now: datetime, sandbox_id: str) -> bool:
    current = _locked(conn, sandbox_id)
    if current is None or current.status != ACTIVE:
        return False
    conn.execute(
        update(sandbox_leases)
        .where(leases.sandbox_id == sandbox_id)
        .values(last_activity_at=now, expires_at=now + timedelta(seconds=current.ttl_seconds))
    )
    return True


def _expiry(row: Any) -> LeaseExpiry:
    """Why a lease that ``expire_all`` selected has ended; named conditions before TTL."""
    if row.session_id is not None and row.live_session is None:
        return LeaseExpiry.SESSION_DELETED
    if row.session_id is not None and row.terminated_at is not None:
        return LeaseExpiry.SESSION_TERMINATED
    if row.session_id is not None and row.session_archived_at is not None:
        return LeaseExpiry.SESSION_ARCHIVED
    if row.live_environment is None or row.archived_at is not None:
        return LeaseExpiry.ENVIRONMENT_ARCHIVED
    return LeaseExpiry.TTL


def expire_all(conn: Connection, now: datetime) -> list[SandboxLease]:
    """Expires every active lease whose TTL passed or whose condition holds."""
    joined = sandbox_leases.outerjoin(
        sessions,
        and_(sessions.c.id == leases.session_id, sessions.c.workspace_id == leases.workspace_id),
    ).outerjoin(
        environments,
        and_(
            environments.c.id == leases.environment_id,
            environments.c.workspace_id == leases.workspace_id,
        ),
    )
    session_gone = and_(
        leases.session_id.is_not(None),
        or_(
            sessions.c.id.is_(None),
            sessions.c.terminated_at.is_not(None),
            sessions.c.archived_at.is_not(None),
        ),
    )
    stmt = (
        select(
            sandbox_leases,
            sessions.c.id.label("live_session"),
            sessions.c.terminated_at,
            sessions.c.archived_at.label("session_archived_at"),
            environments.c.id.label("live_environment"),
            environments.c.archived_at,
        )
        .select_from(joined)
        .where(
            leases.status == ACTIVE,
            or_(
                leases.expires_at <= now,
                session_gone,
                environments.c.id.is_(None),
                environments.c.archived_at.is_not(None),
            ),
        )
        .order_by(leases.sandbox_id)
        .with_for_update(of=sandbox_leases)
    )
    expired = []
    for row in conn.execute(stmt).all():
        reason = _expiry(row)
        if _set_expired(conn, now, row.sandbox_id, reason):
            lease = dataclasses.replace(
                _record(row), status=EXPIRED, expiry_reason=reason, expired_at=now
            )
            expired.append(lease)
    return expired


def _set_expired(conn: Connection, now: datetime, sandbox_id: str, reason: LeaseExpiry) -> bool:
    result = conn.execute(
        update(sandbox_leases)
        .where(leases.sandbox_id == sandbox_id, leases.status == ACTIVE)
        .values(status=EXPIRED, expiry_reason=reason, expired_at=now)
    )
    return result.rowcount == 1


def expire_one(conn: Connection, now: datetime, sandbox_id: str, reason: LeaseExpiry) -> bool:
    return _set_expired(conn, now, sandbox_id, LeaseExpiry(reason))


def get(conn: Connection, sandbox_id: str) -> SandboxLease | None:
    # Compiled: every claim reads its session's lease (``_claims.claim``).
    statement = compiled(
        conn,
        "sandbox_leases.get",
        lambda: select(sandbox_leases).where(leases.sandbox_id == bindparam("sandbox_id")),
    )
    rows = statement.fetch(conn, {"sandbox_id": sandbox_id})
    return _record(rows[0]) if rows else None


def to_destroy(conn: Connection) -> list[SandboxLease]:
    stmt = (
        select(sandbox_leases)
        .where(leases.status == EXPIRED)
        .order_by(leases.expired_at, leases.sandbox_id)
    )
    return [_record(row) for row in conn.execute(stmt).all()]


def mark_destroyed(
    conn: Connection, now: datetime, sandbox_id: str, reason: LeaseExpiry | None = None
) -> bool:
    ended = [leases.expiry_reason == reason] if reason is not None else []
    result = conn.execute(
        update(sandbox_leases)
        .where(leases.sandbox_id == sandbox_id, leases.status == EXPIRED, *ended)
        .values(
            status=SandboxLeaseStatus.DESTROYED, destroyed_at=now, host_id=None, host_address=None
        )
    )
    return result.rowcount == 1


def session_deleted(conn: Connection, session_id: str) -> None:
    """The session's lease (its sandbox id is the session's), if it already
    ended, is to be destroyed again, for its session's deletion: that destroy
    erases what an earlier one saved. An active one ends so at the sweeper's
    next round (``expire_all``)."""
    # Locked first: an expiry another transaction is committing (which read the
    # session as still there) is waited for, not passed over as still active.
    current = _locked(conn, session_id)
    if current is None or current.session_id != session_id or current.status == ACTIVE:
        return
    conn.execute(
        update(sandbox_leases)
        .where(leases.sandbox_id == session_id)
        .values(status=EXPIRED, expiry_reason=LeaseExpiry.SESSION_DELETED, destroyed_at=None)
    )


def add_active_seconds(
    conn: Connection,
    now: datetime,
    sandbox_id: str,
    session_id: str | None,
    workspace_id: str,
    seconds: float,
) -> None:
    check_amount("seconds", seconds, allow_zero=True)
    upsert = compiled(
        conn,
        "sandbox_usage.add",
        lambda: added_on_conflict(conn, sandbox_usage, ["sandbox_id"], ["active_seconds"]),
    )
    row = {
        "sandbox_id": sandbox_id,
        "workspace_id": workspace_id,
        "session_id": session_id,
        "active_seconds": seconds,
        "updated_at": now,
    }
    upsert.execute(conn, row).close()


def locked_active_seconds(conn: Connection, sandbox_id: str) -> float:
    """The sandbox's booked active time (0 if none), its row locked until commit."""
    statement = compiled(
        conn,
        "sandbox_usage.locked",
        lambda: (
            select(sandbox_usage.c.active_seconds)
            .where(sandbox_usage.c.sandbox_id == bindparam("sandbox_id"))
            .with_for_update()
        ),
    )
    rows = statement.fetch(conn, {"sandbox_id": sandbox_id})
    return float(rows[0].active_seconds) if rows else 0.0


def active_seconds(conn: Connection, sandbox_id: str) -> float:
    stmt = select(sandbox_usage.c.active_seconds).where(sandbox_usage.c.sandbox_id == sandbox_id)
    found = conn.execute(stmt).scalar_one_or_none()
    return 0.0 if found is None else float(found)
