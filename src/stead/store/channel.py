"""Wake-ups between the processes that share one store, through the database.

On PostgreSQL a ``Channel`` is LISTEN/NOTIFY on a channel named after the
schema (``pgchannel.py``), so servers on different schemas of one database
never hear each other. It carries short text notices, never data: what a notice
announces is read from the store. A notice can be lost (a connection that
drops, a process that dies between its commit and its notice); receivers heal
by polling, so nothing here retries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import anyio
from anyio.abc import TaskStatus


class Channel(Protocol):
    async def send(self, notices: Sequence[str]) -> None:
        """Sends ``notices`` (one round trip), in order. Raises ``ChannelDown``
        when the database does not take them in time; the next call reconnects."""
        ...

    async def listen(
        self,
        received: Callable[[str], None],
        reconnected: Callable[[], None],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Calls ``received`` with every notice sent by any process (this one too)
        until cancelled. Started once listening, or once the first connection
        failed (it keeps trying). A lost connection is made again with backoff;
        ``reconnected`` is called once listening again, since notices sent in
        between are lost."""
        ...

    async def aclose(self) -> None: ...


def open_channel(url: str) -> Channel:
    """The channel of the PostgreSQL database ``url`` names; no I/O until used."""
    # Imported here: a SQLite server never loads the PostgreSQL driver.
    from stead.store.pgchannel import PgChannel

    return PgChannel(url)
