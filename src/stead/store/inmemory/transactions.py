"""``Transactions``: what every method of ``InMemoryStore`` runs through. A write
is ``fn(tables, now, *args)``, all or nothing: the tables (and the request's
Idempotency-Key, taken in it) are put back when it raises. A call runs without
an await after its first checkpoint, so no two interleave (the SQL store's row
locks and single writer give the same)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from anyio.lowlevel import checkpoint

from stead.store.errors import DatabaseBusy
from stead.store.idempotency import KeyClaim, wanted_key
from stead.store.inmemory import idempotency
from stead.store.inmemory.tables import Tables

R = TypeVar("R")


def utc_now() -> datetime:
    return datetime.now(UTC)


class Transactions:
    """The tables of one in-memory store and the clock its writes read."""

    def __init__(self, *, clock: Callable[[], datetime] = utc_now) -> None:
        self._tables = Tables()
        self._now = clock
        self._closed = False

    async def close(self) -> None:
        self._closed = True

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        return await self._write_at(None, fn, *args)

    async def _write_at(self, now: datetime | None, fn: Callable[..., R], *args: Any) -> R:
        """Runs ``fn(tables, now, *args)`` as one transaction, which takes the
        request's Idempotency-Key when it has one (``wanted_key``): on any raise
        the tables are put back as they were."""
        return await self._transaction(now, wanted_key(), fn, *args)

    async def _write_unclaimed(self, fn: Callable[..., R], *args: Any) -> R:
        """``_write`` that never takes the request's key (``claiming_key``): for
        the key's own claim, answer and release, as ``SqlStore._write_unflushed``."""
        return await self._transaction(None, None, fn, *args)

    async def _transaction(
        self, now: datetime | None, pending: KeyClaim | None, fn: Callable[..., R], *args: Any
    ) -> R:
        await self._ready()
        before = self._tables.snapshot()
        at = self._now() if now is None else now
        try:
            if pending is not None:
                idempotency.take(self._tables, at, pending)
            result = fn(self._tables, at, *args)
        except BaseException:
            self._tables = before
            raise
        if pending is not None:
            pending.taken = True
        return result

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        await self._ready()
        return fn(self._tables, *args)

    async def _ready(self) -> None:
        # A checkpoint, so concurrent callers interleave between calls as they
        # would on a database, never inside one.
        await checkpoint()
        if self._closed:
            raise DatabaseBusy("the store is closed")
