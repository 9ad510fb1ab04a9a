"""Connection workers: threads that each own one long-lived database connection.

The store runs every transaction on one of them: a single worker for writes on
SQLite (so writes run one at a time, in submission order), a few on PostgreSQL
(whose transactions keep their invariants with row locks, ``_locks.py``), and a
few for reads. A write that PostgreSQL aborted for a deadlock, a serialisation
failure or a lost race to insert a unique key is run again from the start: its
transaction was rolled back as a whole, and the rerun decides on what won. A
dedicated thread hands work over in a fraction of the time a general worker
pool needs, and a long-lived connection skips the pool's checkout and reset on
every transaction. The ``SqlStore`` that starts the workers stops them in ``close``.

A database that went away, a lock not granted in time, or a call that waited
longer than ``wait_seconds`` for a free worker fails with ``DatabaseBusy`` (the
API's retryable 503), never a hang: the worker drops a lost connection and the
next call connects again, so the process recovers when the database returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Dialect, Engine
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from stead.jsonvalues import JsonValueError
from stead.store.errors import DatabaseBusy, InvalidValue

R = TypeVar("R")
_STOP = object()
RETRIED_SQLSTATES = frozenset({"40001", "40P01", "23505"})
"""serialization_failure, deadlock_detected, unique_violation (PostgreSQL's codes;
SQLite's single writer never raises them)."""
ATTEMPTS = 3


class ConnectionWorkers:
    def __init__(
        self,
        engine: Engine,
        count: int,
        name: str,
        before_commit: Callable[[], None] | None = None,
        *,
        wait_seconds: float | None = None,
    ) -> None:
        self._engine = engine
        self._before_commit = before_commit
        self._wait_seconds = wait_seconds
        self._closed = False
        self._losses = 0
        """Connections lost so far by any worker (a counter: only ever grows)."""
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"stead-{name}-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    async def run(
        self, work: Callable[[Connection], R], *, flush: bool = True, single: bool = False
    ) -> R:
        """Runs ``work(conn)`` inside one transaction and returns its result.

        If the caller is cancelled the transaction still finishes (committed or
        rolled back as a whole); only the caller stops waiting for it.
        ``flush=False``: the commit is not flushed to disk on its own (SQLite's
        ``synchronous=NORMAL``, PostgreSQL's ``synchronous_commit=off`` for this
        transaction): it survives a process kill, and the next flushed commit
        makes it durable too, but a power loss before that may lose it. Only for
        writes nobody is told have happened (see ``_idempotency``).
        ``single=True``: ``work`` is one statement that reads, a snapshot of its
        own; on PostgreSQL it runs without BEGIN and COMMIT (autocommit), in one
        round trip instead of three.
        """
        if self._closed:
            raise DatabaseBusy("the store is closed (the server is stopping)")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._queue.put((work, loop, future, time.monotonic(), flush, single))
        return await future

    def close(self) -> None:
        """Finishes the queued work, then stops the threads (blocking). A call
        that arrives later is refused, never left waiting for a worker."""
        self._closed = True
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join()
        while True:  # queued behind the stops by a call that checked before the flag
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP:
                _, loop, future, *_ = item
                _deliver(loop, future, DatabaseBusy("the store is closed"), failed=True)

    def _serve(self) -> None:
        conn: Connection | None = None
        made_at = self._losses
        try:
            while (item := self._queue.get()) is not _STOP:
                work, loop, future, queued_at, flush, single = item
                if self._waited_too_long(queued_at):
                    busy = DatabaseBusy(
                        f"no database connection came free in {self._wait_seconds}s"
                    )
                    _deliver(loop, future, busy, failed=True)
                    continue
                try:
                    # Inside the try: a server that does not answer fails this
                    # call (after the connect timeout), not the worker.
                    # A connection made before another worker lost its own is
                    # likely cut too (a database restart): made again first, so
                    # one lost call per restart, not one per worker.
                    if conn is None or conn.invalidated or conn.closed or made_at < self._losses:
                        if conn is not None:
                            conn.close()
                        made_at = self._losses
                        conn = None
                        conn = self._engine.connect()
                    result = self._transaction(conn, work, flush=flush, single=single)
                except BaseException as exc:  # handed to the awaiting task, not swallowed
                    if conn is not None and not conn.invalidated and _connection_lost(exc, conn):
                        # Never reused: a worker that kept it would fail every call.
                        with contextlib.suppress(Exception):
                            conn.invalidate(exc)
                    if conn is None or conn.invalidated:
                        self._losses += 1
                    mapped = _refusal(exc) or _busy(exc, self._engine.dialect) or exc
                    _deliver(loop, future, mapped, failed=True)
                else:
                    _deliver(loop, future, result, failed=False)
        finally:
            if conn is not None:
                conn.close()

    def _waited_too_long(self, queued_at: float) -> bool:
        return self._wait_seconds is not None and time.monotonic() - queued_at > self._wait_seconds

    def _transaction(
        self,
        conn: Connection,
        work: Callable[[Connection], R],
        *,
        flush: bool = True,
        single: bool = False,
    ) -> R:
        if single and conn.dialect.name == "postgresql":
            return self._autocommitted(conn, work)
        if flush or conn.dialect.name != "sqlite":
            return self._attempts(conn, work, flush=flush)
        driver = conn.connection.driver_connection
        assert driver is not None
        # SQLite takes the level only outside a transaction; it is put back
        # after, or the connection is never used again (its next commits
        # would not be flushed either). The level the connection was opened
        # with is read once: only this method changes it, and puts it back.
        level = conn.info.get("stead.synchronous")
        if level is None:
            (level,) = driver.execute("PRAGMA synchronous").fetchone()
            conn.info["stead.synchronous"] = level
        driver.execute("PRAGMA synchronous=NORMAL")
        try:
            return self._attempts(conn, work)
        finally:
            try:
                driver.execute(f"PRAGMA synchronous={int(level)}")
            except Exception as exc:
                conn.invalidate(exc)

    def _autocommitted(self, conn: Connection, work: Callable[[Connection], R]) -> R:
        # The driver then sends no BEGIN before the statement and SQLAlchemy's
        # commit sends nothing; the switch itself is local (no round trip).
        driver = conn.connection.driver_connection
        assert driver is not None
        driver.autocommit = True
        try:
            return self._attempts(conn, work)
        finally:
            try:
                driver.autocommit = False
            except Exception as exc:  # a broken connection: never used again
                if not conn.invalidated:
                    conn.invalidate(exc)

    def _attempts(
        self, conn: Connection, work: Callable[[Connection], R], *, flush: bool = True
    ) -> R:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with conn.begin():
                    if not flush:  # PostgreSQL: for this transaction only
                        conn.exec_driver_sql("SET LOCAL synchronous_commit = off")
                    result = work(conn)
                    if self._before_commit is not None:
                        self._before_commit()
                return result
            except Exception as exc:
                _forget_if_disconnected(conn, exc)
                if attempt == ATTEMPTS or _sqlstate(exc) not in RETRIED_SQLSTATES:
                    raise
        raise AssertionError("unreachable")


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's own exception: compiled statements (``_compiled.py``) raise it
    bare, SQLAlchemy wraps it."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return exc.orig
    return exc


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(_driver_error(exc), "sqlstate", None)


def _forget_if_disconnected(conn: Connection, exc: BaseException) -> None:
    """Drops a connection the server closed (a restart, say), so the next
    transaction opens a new one; SQLAlchemy does this itself only for the
    errors it raised, not for a compiled statement's."""
    if conn.invalidated or isinstance(exc, DBAPIError):
        return
    dialect = conn.dialect
    error = getattr(dialect.loaded_dbapi, "Error", None)
    if error is not None and isinstance(exc, error):
        raw = conn.connection.dbapi_connection
        if dialect.is_disconnect(exc, raw, None):
            conn.invalidate(exc)


def _connection_lost(exc: BaseException, conn: Connection) -> bool:
    """A PostgreSQL error that leaves the connection unusable, which SQLAlchemy does
    not always see as a disconnect: a connection exception (SQLSTATE class 08),
    a server shutting down or starting (57P01-57P03), or a closed connection
    (the driver's error without a SQLSTATE). A cancelled statement (57014) leaves
    the connection usable."""
    if conn.dialect.name != "postgresql":
        return False
    cause = _driver_error(exc)
    errors = conn.dialect.loaded_dbapi
    if not isinstance(cause, (errors.OperationalError, errors.InterfaceError)):
        return False
    state = _sqlstate(exc)
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def _refusal(exc: BaseException) -> InvalidValue | None:
    """The store's serialiser refused a value (raised straight from a compiled
    statement, or wrapped by SQLAlchemy): an ``InvalidValue`` the API answers with 400."""
    cause = exc.orig if isinstance(exc, StatementError) else exc
    if isinstance(cause, JsonValueError):
        return InvalidValue(cause.path, cause.reason)
    return None


def _busy(exc: BaseException, dialect: Dialect) -> DatabaseBusy | None:
    """The database could not serve the call now (``DatabaseBusy``), or None for
    any other failure. On PostgreSQL that is every ``OperationalError`` (lost
    connection, restart, lock or statement timeout, too many connections); on
    SQLite only a lock not granted in time, since its ``OperationalError`` also
    covers mistakes in a statement."""
    if isinstance(exc, PoolTimeout):
        return DatabaseBusy(f"no database connection came free: {exc}")
    cause = _driver_error(exc)
    operational = getattr(dialect.loaded_dbapi, "OperationalError", None)
    if operational is None or not isinstance(cause, operational):
        return None
    text = str(cause)
    if dialect.name == "sqlite" and "locked" not in text and "busy" not in text:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return DatabaseBusy(lines[0] if lines else type(cause).__name__)


def _deliver(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], value: Any, *, failed: bool
) -> None:
    def settle() -> None:
        if future.done():  # the caller was cancelled and stopped waiting
            return
        if failed:
            future.set_exception(value)
        else:
            future.set_result(value)

    with contextlib.suppress(RuntimeError):  # a closed loop has nobody waiting any more
        loop.call_soon_threadsafe(settle)
