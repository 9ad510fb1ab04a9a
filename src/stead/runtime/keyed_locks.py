"""``KeyedLocks``: a lock per key (a sandbox, a credential), kept only while in use.

A map that gave every key a lock of its own and kept it grew by every key a
server ever locked, for as long as it ran. Here a key's lock goes from the map
once nobody holds it or waits for it; the next caller makes a new one. A lock
released to a waiter stays held (anyio hands it over), so it is never dropped
from under the task it was handed to; and a caller takes the lock from the map
and becomes its holder or a waiter with no await between, so no lock can be
dropped between the two either.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


class KeyedLocks:
    def __init__(self) -> None:
        self._locks: dict[str, anyio.Lock] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        """Holds ``key``'s lock for the block: one block per key at a time."""
        lock = self._locks.setdefault(key, anyio.Lock())
        try:
            async with lock:
                yield
        finally:
            # Also when cancelled while waiting: another task may hold the lock
            # then, and it stays for as long as that one does.
            free = not lock.locked() and lock.statistics().tasks_waiting == 0
            if free and self._locks.get(key) is lock:
                del self._locks[key]

    def __len__(self) -> int:
        """Keys whose lock is held or waited for."""
        return len(self._locks)
