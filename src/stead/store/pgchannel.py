"""``Channel`` on PostgreSQL: LISTEN/NOTIFY over two psycopg 3 async connections.

One connection sends (``pg_notify``, autocommit), one listens; each is made on
first use and again after a failure, and every wait on the server is bounded.
The sender's transactions commit without waiting for the write-ahead log's
flush (``synchronous_commit=off``): a notice is a wake-up, never data, and a
lost one is healed by the readers' polling. A waited flush would put a disk
write on every event's way to another process, with PostgreSQL's notify lock
held through it, so notifying transactions would go one at a time.
The channel's name is derived from the connection's schema (``current_schema()``),
so stores in different schemas of one database are kept apart.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence

import anyio
import psycopg
from anyio.abc import TaskStatus
from psycopg import AsyncConnection, sql
from sqlalchemy import make_url

from stead.store.errors import ChannelDown
from stead.store.postgres import CONNECT_TIMEOUT_SECONDS, engine_url

log = logging.getLogger("stead.store.channel")

SEND_TIMEOUT_SECONDS = 5.0
"""Longest wait for the server to take a batch of notices (or answer a probe)."""
QUIET_SECONDS = 10.0
"""A listener that heard nothing this long probes its connection, so a dead one
is noticed and replaced."""
RECONNECT_FIRST_SECONDS = 0.1
RECONNECT_MAX_SECONDS = 5.0
FAILURES = (psycopg.Error, OSError, TimeoutError)
_SEND = "SELECT pg_notify(%s, notice) FROM unnest(%s::text[]) AS notice"


def conninfo(url: str) -> str:
    """``url`` as libpq takes it (its ``options``, such as a ``search_path``, kept)."""
    parsed = make_url(engine_url(url).render_as_string(hide_password=False))
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


async def connect(url: str, *, sends: bool = False) -> tuple[AsyncConnection, str]:
    """An autocommit connection and the channel name of its schema; ``sends``:
    one whose commits do not wait for the log's flush."""
    with anyio.fail_after(CONNECT_TIMEOUT_SECONDS + 1):
        conn = await AsyncConnection.connect(
            conninfo(url),
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name="stead-bus",
        )
        try:
            if sends:
                await conn.execute("SET synchronous_commit TO off")
            cursor = await conn.execute("SELECT current_schema()")
            row = await cursor.fetchone()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.close()
            raise
    schema = str(row[0]) if row is not None else ""
    # A schema name may be as long as a channel name may be: hash it.
    return conn, "stead_" + hashlib.sha256(schema.encode()).hexdigest()[:24]


async def _close(conn: AsyncConnection | None) -> None:
    if conn is None:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(SEND_TIMEOUT_SECONDS):
        await conn.close()


class PgChannel:
    def __init__(self, url: str) -> None:
        self._url = url
        self._sender: AsyncConnection | None = None
        self._name = ""
        self._lock = anyio.Lock()

    async def send(self, notices: Sequence[str]) -> None:
        async with self._lock:
            try:
                with anyio.fail_after(SEND_TIMEOUT_SECONDS):
                    if self._sender is None:
                        self._sender, self._name = await connect(self._url, sends=True)
                    await self._sender.execute(_SEND, (self._name, list(notices)))
            except FAILURES as exc:
                # Its state is unknown after a failure or a timeout: start afresh.
                sender, self._sender = self._sender, None
                await _close(sender)
                raise ChannelDown(f"notices not sent: {_first_line(exc)}") from None

    async def listen(
        self,
        received: Callable[[str], None],
        reconnected: Callable[[], None],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        started = False
        delay = RECONNECT_FIRST_SECONDS
        while True:
            conn: AsyncConnection | None = None
            try:
                conn, name = await connect(self._url)
                with anyio.fail_after(SEND_TIMEOUT_SECONDS):
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
                delay = RECONNECT_FIRST_SECONDS
                if started:
                    reconnected()
                else:
                    started = True
                    task_status.started()
                await _receive(conn, received)
            except FAILURES as exc:
                log.warning(
                    "notices from other processes: %s; listening again in %.1fs",
                    _first_line(exc),
                    delay,
                )
            finally:
                await _close(conn)
            if not started:
                # Serve without notices meanwhile: readers poll, and the
                # reconnect below tells them to read again.
                started = True
                task_status.started()
            await anyio.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_SECONDS)

    async def aclose(self) -> None:
        async with self._lock:
            sender, self._sender = self._sender, None
            await _close(sender)


async def _receive(conn: AsyncConnection, received: Callable[[str], None]) -> None:
    """Until the connection fails (raises)."""
    while True:
        async for notify in conn.notifies(timeout=QUIET_SECONDS):
            received(notify.payload)
        with anyio.fail_after(SEND_TIMEOUT_SECONDS):
            await conn.execute("SELECT 1")


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
