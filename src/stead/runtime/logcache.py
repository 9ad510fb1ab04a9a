"""Each busy session's log, kept in memory between steps and runs.

The log is append-only, so a cached copy stays right: each read fetches only
the events after the last one seen. Bounded: the least recently used sessions
are forgotten (and read from the store again if they come back).
"""

from __future__ import annotations

from collections import OrderedDict

from stead.jsonvalues import Json
from stead.runtime import events as ev
from stead.store import Store

READ_ALL = 1_000_000_000


class LogCache:
    def __init__(self, store: Store, capacity: int = 256) -> None:
        self._store = store
        self._capacity = capacity
        self._logs: OrderedDict[str, tuple[int, list[Json]]] = OrderedDict()

    async def read(self, session_id: str) -> list[Json]:
        """The session's whole log, as harness dicts, up to date."""
        last_seq, log = self._logs.pop(session_id, (0, []))
        fresh = await self._store.events_after(session_id, last_seq, READ_ALL)
        if fresh:
            log = log + [ev.as_log(r) for r in fresh]
            last_seq = fresh[-1].seq or last_seq
        self._logs[session_id] = (last_seq, log)
        while len(self._logs) > self._capacity:
            self._logs.popitem(last=False)
        return log
