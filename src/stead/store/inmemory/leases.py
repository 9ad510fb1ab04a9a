"""Sandbox leases, sandbox time and the usage ledger in memory (``_leases.py``
and ``_usage.py``'s rules). Expiry conditions are read from the sessions and
environments tables at the time, never copied into the lease."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import date, datetime, timedelta
from typing import Any

from stead import usage as accounting
from stead.store._leases import check_amount, fresh, moved_to, placed, taken_again
from stead.store._usage import LEDGER_COUNTERS, SANDBOX_TIME
from stead.store.errors import SandboxLeaseEnded
from stead.store.inmemory.tables import LedgerAmounts, SandboxTime, Tables, loaded, stored
from stead.store.leases import LeaseExpiry, LeaseHost, SandboxLease, SandboxLeaseStatus
from stead.store.usage import LedgerRow

ACTIVE = SandboxLeaseStatus.ACTIVE
EXPIRED = SandboxLeaseStatus.EXPIRED


def _ended_reason(
    t: Tables, workspace_id: str, session_id: str | None, environment_id: str
) -> LeaseExpiry | None:
    """The condition that rules the sandbox out now, if one holds."""
    if session_id is not None:
        session = t.sessions.get(session_id)
        if session is None or session.workspace_id != workspace_id:
            return LeaseExpiry.SESSION_DELETED
        if session.terminated_at is not None:
            return LeaseExpiry.SESSION_TERMINATED
        if session.archived_at is not None:
            return LeaseExpiry.SESSION_ARCHIVED
    environment = t.environments.get(environment_id)
    if environment is None or environment.workspace_id != workspace_id:
        return LeaseExpiry.ENVIRONMENT_ARCHIVED
    if environment.archived_at is not None:
        return LeaseExpiry.ENVIRONMENT_ARCHIVED
    return None


def acquire(
    t: Tables,
    now: datetime,
    sandbox_id: str,
    workspace_id: str,
    session_id: str | None,
    environment_id: str,
    agent_id: str | None,
    ttl_seconds: float,
    host: LeaseHost | None = None,
) -> SandboxLease:
    check_amount("ttl_seconds", ttl_seconds, allow_zero=False)
    ended = _ended_reason(t, workspace_id, session_id, environment_id)
    if ended is not None:
        raise SandboxLeaseEnded(sandbox_id, ended)
    owner: dict[str, Any] = {
        "workspace_id": workspace_id,
        "session_id": session_id,
        "environment_id": environment_id,
        "agent_id": agent_id,
    }
    current = t.leases.get(sandbox_id)
    if current is None:
        new = {**owner, **fresh(now, ttl_seconds), **placed(host, 0)}
        lease = SandboxLease(sandbox_id=sandbox_id, **new)
    else:
        change = taken_again(current, owner, now, ttl_seconds, host)
        lease = dataclasses.replace(current, **change)
    t.leases[sandbox_id] = lease
    return lease


def move(
    t: Tables, _now: datetime, sandbox_id: str, placement: int, host: LeaseHost
) -> SandboxLease | None:
    current = t.leases.get(sandbox_id)
    if current is None or current.status != ACTIVE:
        return None
    lease = dataclasses.replace(current, **moved_to(current, placement, host))
    t.leases[sandbox_id] = lease
    return lease


def renew(t: Tables, now: datetime, sandbox_id: str) -> bool:
    current = t.leases.get(sandbox_id)
    if current is None or current.status != ACTIVE:
        return False
    expires = now + timedelta(seconds=current.ttl_seconds)
    t.leases[sandbox_id] = dataclasses.replace(current, last_activity_at=now, expires_at=expires)
    return True


def _expiry(t: Tables, lease: SandboxLease, now: datetime) -> LeaseExpiry | None:
    """Why an active lease has ended, if it has; named conditions before TTL."""
    ended = _ended_reason(t, lease.workspace_id, lease.session_id, lease.environment_id)
    if ended is not None:
        return ended
    return LeaseExpiry.TTL if lease.expires_at <= now else None


def _set_expired(t: Tables, now: datetime, sandbox_id: str, reason: LeaseExpiry) -> SandboxLease:
    lease = dataclasses.replace(
        t.leases[sandbox_id], status=EXPIRED, expiry_reason=reason, expired_at=now
    )
    t.leases[sandbox_id] = lease
    return lease


def expire_all(t: Tables, now: datetime) -> list[SandboxLease]:
    expired = []
    for sandbox_id in sorted(t.leases):
        lease = t.leases[sandbox_id]
        reason = _expiry(t, lease, now) if lease.status == ACTIVE else None
        if reason is not None:
            expired.append(_set_expired(t, now, sandbox_id, reason))
    return expired


def expire_one(t: Tables, now: datetime, sandbox_id: str, reason: LeaseExpiry) -> bool:
    current = t.leases.get(sandbox_id)
    if current is None or current.status != ACTIVE:
        return False
    _set_expired(t, now, sandbox_id, LeaseExpiry(reason))
    return True


def to_destroy(t: Tables) -> list[SandboxLease]:
    expired = [lease for lease in t.leases.values() if lease.status == EXPIRED]
    return sorted(expired, key=lambda lease: (lease.expired_at, lease.sandbox_id))


def mark_destroyed(
    t: Tables, now: datetime, sandbox_id: str, reason: LeaseExpiry | None = None
) -> bool:
    current = t.leases.get(sandbox_id)
    if current is None or current.status != EXPIRED:
        return False
    if reason is not None and current.expiry_reason != reason:
        return False
    t.leases[sandbox_id] = dataclasses.replace(
        current,
        status=SandboxLeaseStatus.DESTROYED,
        destroyed_at=now,
        host_id=None,
        host_address=None,
    )
    return True


def session_deleted(t: Tables, session_id: str) -> None:
    lease = t.leases.get(session_id)
    if lease is not None and lease.session_id == session_id and lease.status != ACTIVE:
        t.leases[session_id] = dataclasses.replace(
            lease, status=EXPIRED, expiry_reason=LeaseExpiry.SESSION_DELETED, destroyed_at=None
        )


def active_seconds(t: Tables, sandbox_id: str) -> float:
    found = t.sandbox_time.get(sandbox_id)
    return 0.0 if found is None else found.active_seconds


def add_usage(
    t: Tables, now: datetime, session_id: str, model: str, delta: Mapping[str, Any]
) -> bool:
    """``_usage.add``: to the session's usage and its ledger row; False when it is gone."""
    row = t.sessions.get(session_id)
    if row is None:
        return False
    total = accounting.added(loaded(row.usage) or {}, delta)
    t.sessions[session_id] = dataclasses.replace(row, usage=stored(total))
    ledger_add(t, now, row.workspace_id, session_id, model, delta)
    return True


def ledger_add(
    t: Tables,
    now: datetime,
    workspace_id: str,
    session_id: str,
    model: str,
    delta: Mapping[str, Any],
) -> None:
    key = (workspace_id, now.date(), session_id, model)
    had = t.ledger.get(key, LedgerAmounts((), 0.0))
    counters = dict(had.counters)
    for name in LEDGER_COUNTERS:
        counters[name] = counters.get(name, 0) + int(delta.get(name, 0))
    seconds = had.active_seconds + float(delta.get("active_seconds", 0.0))
    t.ledger[key] = LedgerAmounts(tuple(counters.items()), seconds)


def add_active_seconds(
    t: Tables,
    now: datetime,
    sandbox_id: str,
    session_id: str | None,
    workspace_id: str,
    seconds: float,
) -> None:
    check_amount("seconds", seconds, allow_zero=True)
    had = active_seconds(t, sandbox_id)
    t.sandbox_time[sandbox_id] = SandboxTime(workspace_id, session_id, had + seconds)
    delta = {"active_seconds": seconds}
    if session_id is None or not add_usage(t, now, session_id, SANDBOX_TIME, delta):
        # A shared sandbox, or a deleted session's: the workspace's ledger still has it.
        ledger_add(t, now, workspace_id, session_id or SANDBOX_TIME, SANDBOX_TIME, delta)


def book_active_seconds(
    t: Tables,
    now: datetime,
    sandbox_id: str,
    session_id: str | None,
    workspace_id: str,
    total: float,
) -> float:
    missing = total - active_seconds(t, sandbox_id)
    if missing <= 0:
        return 0.0
    add_active_seconds(t, now, sandbox_id, session_id, workspace_id, missing)
    return missing


def book_session_sandbox(t: Tables, now: datetime, session_id: str, total: float) -> None:
    row = t.sessions.get(session_id)
    if row is not None:
        book_active_seconds(t, now, session_id, session_id, row.workspace_id, total)


def ledger(t: Tables, workspace_id: str, first: date | None, last: date | None) -> list[LedgerRow]:
    rows = [
        LedgerRow(
            day=day,
            session_id=session_id or None,
            model=model or None,
            counters=dict(amounts.counters),
            active_seconds=amounts.active_seconds,
        )
        for (workspace, day, session_id, model), amounts in sorted(t.ledger.items())
        if workspace == workspace_id
        and (first is None or day >= first)
        and (last is None or day <= last)
    ]
    return rows
