"""Row locks for the invariants SQLite keeps by having one writer.

On SQLite every write transaction holds the database's write lock (BEGIN
IMMEDIATE), so a read-then-write inside one cannot race another. PostgreSQL runs
write transactions side by side, from this process and from others, so each
read-then-write takes the lock of the row it decides on first, before that read.

Order, to keep transactions from deadlocking: a session row before its runs,
ops, events, pending events and sandbox leases. Every session-scoped write locks
the session first (``session``/``run_session``), whatever it touches next.
On SQLite these helpers return at once: the write lock already covers them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, bindparam, select

from stead.store._compiled import compiled
from stead.store.tables import runs, sessions


def _shared_writer(conn: Connection) -> bool:
    return conn.dialect.name != "sqlite"


def _session_statement() -> Any:
    return select(sessions.c.id).where(sessions.c.id == bindparam("session_id")).with_for_update()


def session(conn: Connection, session_id: str) -> None:
    """Holds the session's row until commit (a missing session locks nothing)."""
    if _shared_writer(conn):
        statement = compiled(conn, "lock.session", _session_statement)
        statement.execute(conn, {"session_id": session_id}).close()


def _run_session_statement() -> Any:
    owner = select(runs.c.session_id).where(runs.c.id == bindparam("run_id")).scalar_subquery()
    return select(sessions.c.id).where(sessions.c.id == owner).with_for_update()


def run_session(conn: Connection, run_id: str) -> None:
    """Holds the row of run ``run_id``'s session until commit."""
    if _shared_writer(conn):
        statement = compiled(conn, "lock.run_session", _run_session_statement)
        statement.execute(conn, {"run_id": run_id}).close()


def row(conn: Connection, table: Table, ident: str, *, shared: bool = False) -> None:
    """Holds ``table``'s row ``ident`` until commit: ``shared`` lets other shared
    holders in and keeps writers out (a row that must not change, not one to change)."""
    if _shared_writer(conn):
        stmt = select(table.c.id).where(table.c.id == ident).with_for_update(read=shared)
        conn.execute(stmt)
