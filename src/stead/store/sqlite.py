"""SQLite connection setup: WAL, the chosen ``synchronous`` level, explicit BEGINs.

Durability: every write transaction commits with ``synchronous=FULL`` in WAL
mode by default, so an acknowledged event survives a process kill *and* a power
loss. ``NORMAL`` (``STEAD_SQLITE_SYNCHRONOUS=NORMAL``) still survives a process
kill but may lose the last commits on power loss; it exists for machines with
slow fsync.

Writes use ``BEGIN IMMEDIATE`` on a single pooled connection so a transaction
never has to upgrade its lock halfway; reads use deferred ``BEGIN`` on their
own pool and see one consistent snapshot each.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event

from stead.jsonvalues import dumps_checked

BUSY_TIMEOUT_MS = 10_000


def _configure(synchronous: str) -> Any:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        # The driver's implicit transactions would defeat BEGIN IMMEDIATE.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.close()

    return on_connect


def _engine(url: str, synchronous: str, begin: str, pool_size: int) -> Engine:
    engine = create_engine(
        url,
        pool_size=pool_size,
        max_overflow=0,
        connect_args={"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000},
        # What is written must render back: a refused value rolls the transaction back.
        json_serializer=dumps_checked,
    )
    event.listen(engine, "connect", _configure(synchronous))
    # Straight to the driver: the same statement without SQLAlchemy's per-execution work.
    event.listen(engine, "begin", lambda conn: conn.connection.driver_connection.execute(begin))
    return engine


def sqlite_engines(url: str, synchronous: str, readers: int) -> tuple[Engine, Engine]:
    """(writer, reader) engines on one database file."""
    writer = _engine(url, synchronous, "BEGIN IMMEDIATE", pool_size=1)
    reader = _engine(url, synchronous, "BEGIN", pool_size=readers)
    return writer, reader
