"""Usage: a session's cumulative counters and the workspace ledger by day.

Every addition is made in the transaction that records what was used (a model
request's usage with its ``span.model_request_end``, sandbox time with the write
that books it), so a replay after a crash never counts anything twice. Callers
hold the session's row lock (``_locks``) before they add to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from stead import usage as accounting
from stead.store import _leases, _locks
from stead.store._compiled import compiled
from stead.store._leases import added_on_conflict
from stead.store.tables import sessions, usage_ledger, usage_months
from stead.store.usage import LedgerRow

LEDGER_COUNTERS = tuple(c for c in accounting.COUNTERS if c != "cache_creation_input_tokens")
"""The ledger keeps cache writes by TTL only (their sum is the total)."""
TOKEN_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "ephemeral_5m_input_tokens",
    "ephemeral_1h_input_tokens",
)
"""The ledger's counters that are tokens: a monthly token limit counts their sum."""
SANDBOX_TIME = ""
"""The ledger's ``model`` for sandbox time (and its ``session_id`` for a shared sandbox)."""


def _session_statement() -> Any:
    return select(sessions.c.workspace_id, sessions.c.usage, sessions.c.budget).where(
        sessions.c.id == bindparam("session_id")
    )


def session_row(conn: Connection, session_id: str) -> Any:
    """The session's workspace_id, usage and budget; None if it is gone."""
    rows = compiled(conn, "usage.session", _session_statement).fetch(
        conn, {"session_id": session_id}
    )
    return rows[0] if rows else None


def _set_statement() -> Any:
    return (
        update(sessions)
        .where(sessions.c.id == bindparam("b_id"))
        .values(usage=bindparam("b_usage"))
    )


def add(
    conn: Connection, now: datetime, session_id: str, model: str, delta: Mapping[str, Any]
) -> bool:
    """Adds ``delta`` (``stead.usage`` counters, ``active_seconds``) to the session's
    usage and to its ledger row for today and ``model``; False (nothing added)
    when the session is gone."""
    row = session_row(conn, session_id)
    if row is None:
        return False
    total = accounting.added(row.usage or {}, delta)
    compiled(conn, "usage.set", _set_statement).execute(
        conn, {"b_id": session_id, "b_usage": total}
    ).close()
    ledger_add(conn, now, row.workspace_id, session_id, model, delta)
    return True


def ledger_add(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    session_id: str,
    model: str,
    delta: Mapping[str, Any],
) -> None:
    """Adds ``delta`` to the ledger's row for today, and to the workspace's month."""
    counters = {name: int(delta.get(name, 0)) for name in LEDGER_COUNTERS}
    seconds = float(delta.get("active_seconds", 0.0))
    day = now.date().isoformat()
    row = {"workspace_id": workspace_id, "active_seconds": seconds, "updated_at": now}
    compiled(conn, "usage.ledger_add", lambda: _ledger_upsert(conn)).execute(
        conn, {**row, **counters, "day": day, "session_id": session_id, "model": model}
    ).close()
    month = {
        "month": day[:7],
        "tokens": sum(counters[name] for name in TOKEN_COLUMNS),
        "list_cost_nanos": counters["list_cost_nanos"],
    }
    compiled(conn, "usage.month_add", lambda: _month_upsert(conn)).execute(
        conn, {**row, **month}
    ).close()


def _ledger_upsert(conn: Connection) -> Any:
    keys = ["workspace_id", "day", "session_id", "model"]
    return added_on_conflict(conn, usage_ledger, keys, [*LEDGER_COUNTERS, "active_seconds"])


def _month_upsert(conn: Connection) -> Any:
    grown = ["tokens", "list_cost_nanos", "active_seconds"]
    return added_on_conflict(conn, usage_months, ["workspace_id", "month"], grown)


def add_active_seconds(
    conn: Connection,
    now: datetime,
    sandbox_id: str,
    session_id: str | None,
    workspace_id: str,
    seconds: float,
) -> None:
    """Adds ``seconds`` to the sandbox's active time, its session's usage and the ledger."""
    if session_id is not None:
        _locks.session(conn, session_id)  # before the usage row (``_locks`` order)
    _leases.add_active_seconds(conn, now, sandbox_id, session_id, workspace_id, seconds)
    delta = {"active_seconds": seconds}
    if session_id is None or not add(conn, now, session_id, SANDBOX_TIME, delta):
        # A shared sandbox, or a deleted session's: the workspace's ledger still has it.
        ledger_add(conn, now, workspace_id, session_id or SANDBOX_TIME, SANDBOX_TIME, delta)


def book_session_sandbox(conn: Connection, now: datetime, session_id: str, total: float) -> None:
    """``book_active_seconds`` for the session's own sandbox (its id is the session's)."""
    row = session_row(conn, session_id)
    if row is not None:
        book_active_seconds(conn, now, session_id, session_id, row.workspace_id, total)


def book_active_seconds(
    conn: Connection,
    now: datetime,
    sandbox_id: str,
    session_id: str | None,
    workspace_id: str,
    total: float,
) -> float:
    """Books the sandbox's active time up to ``total`` (the host's count of all its
    wakes): only what is not booked yet is added, so booking the same total
    twice adds nothing. Returns the seconds added."""
    if session_id is not None:
        _locks.session(conn, session_id)
    missing = total - _leases.locked_active_seconds(conn, sandbox_id)
    if missing <= 0:
        return 0.0
    add_active_seconds(conn, now, sandbox_id, session_id, workspace_id, missing)
    return missing


def ledger(
    conn: Connection, workspace_id: str, first: date | None, last: date | None
) -> list[LedgerRow]:
    """The workspace's ledger rows from ``first`` to ``last`` (UTC days, both
    included), by day, then session, then model."""
    columns = usage_ledger.c
    stmt = select(usage_ledger).where(columns.workspace_id == workspace_id)
    if first is not None:
        stmt = stmt.where(columns.day >= first.isoformat())
    if last is not None:
        stmt = stmt.where(columns.day <= last.isoformat())
    stmt = stmt.order_by(columns.day, columns.session_id, columns.model)
    return [
        LedgerRow(
            day=date.fromisoformat(row.day),
            session_id=row.session_id or None,
            model=row.model or None,
            counters={name: int(getattr(row, name)) for name in LEDGER_COUNTERS},
            active_seconds=float(row.active_seconds),
        )
        for row in conn.execute(stmt).all()
    ]
