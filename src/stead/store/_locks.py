"""Row locks for the invariants SQLite keeps by having one writer.

On SQLite every write transaction holds the database's write lock (BEGIN
IMMEDIATE), so a read-then-write inside one cannot race another. PostgreSQL runs
write transactions side by side, from this process and from others, so each
read-then-write takes the lock of the row it decides on first, before that read.

Order, to keep transactions from deadlocking: a session row before its runs,
ops, events, pending events and sandbox leases. Every session-scoped write locks
the session first (``session``/``run_session``), whatever it touches next.
On SQLite these helpers return at once: the write lock already covers them.
A session's lock is taken once per transaction: a later call in the same one
sends nothing (the row stays held until commit).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Table, bindparam, select, text

from stead.store._compiled import compiled
from stead.store.tables import runs, sessions


def _shared_writer(conn: Connection) -> bool:
    return conn.dialect.name != "sqlite"


def _session_statement() -> Any:
    return select(sessions.c.id).where(sessions.c.id == bindparam("session_id")).with_for_update()


def _held(conn: Connection) -> set[str]:
    """The sessions whose rows this transaction holds."""
    transaction = conn.get_transaction()
    held: tuple[object, set[str]] | None = conn.info.get("stead.held")
    if held is None or held[0] is not transaction:
        held = conn.info["stead.held"] = (transaction, set())
    return held[1]


def session(conn: Connection, session_id: str) -> None:
    """Holds the session's row until commit (a missing session locks nothing)."""
    if _shared_writer(conn):
        held = _held(conn)
        if session_id in held:
            return
        statement = compiled(conn, "lock.session", _session_statement)
        statement.execute(conn, {"session_id": session_id}).close()
        held.add(session_id)


def taken(conn: Connection, session_id: str) -> None:
    """Notes that a statement of this transaction locked the session's row itself."""
    if _shared_writer(conn):
        _held(conn).add(session_id)


def _run_session_statement() -> Any:
    owner = select(runs.c.session_id).where(runs.c.id == bindparam("run_id")).scalar_subquery()
    return select(sessions.c.id).where(sessions.c.id == owner).with_for_update()


def run_session(conn: Connection, run_id: str) -> None:
    """Holds the row of run ``run_id``'s session until commit."""
    if _shared_writer(conn):
        statement = compiled(conn, "lock.run_session", _run_session_statement)
        rows = statement.fetch(conn, {"run_id": run_id})
        _held(conn).update(row.id for row in rows)


def row(conn: Connection, table: Table, ident: str, *, shared: bool = False) -> None:
    """Holds ``table``'s row ``ident`` until commit: ``shared`` lets other shared
    holders in and keeps writers out (a row that must not change, not one to change)."""
    if _shared_writer(conn):
        stmt = select(table.c.id).where(table.c.id == ident).with_for_update(read=shared)
        conn.execute(stmt)


def table(conn: Connection, locked: Table) -> None:
    """Holds ``locked`` against every other writer of it until commit: for a
    decision on whether the table has rows at all, which no row lock covers.
    Readers go on; another transaction taking this lock waits for the commit."""
    if _shared_writer(conn):
        conn.execute(text(f"LOCK TABLE {locked.name} IN SHARE ROW EXCLUSIVE MODE"))
