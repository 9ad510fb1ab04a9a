"""Each busy session's log, kept in memory between steps and runs.

The log is append-only, so a cached copy stays right: each read fetches only
the events after the last one seen, and a write or claim that returns the log
after the cache's last ``seq`` (``since``) brings it up to date with no read of
its own. Bounded (``Bounded``) by sessions, by events and by their weight in
memory (``jsonvalues.weight``: an image's tool result weighs five megabytes, a
status change a few dozen bytes), as an idle session's log stays until
something pushes it out: the least recently used sessions are forgotten (and
read from the store again if they come back) while more than ``capacity``
sessions, ``max_events`` events or ``max_bytes`` are held; the session kept
last always stays.
"""

from __future__ import annotations

from collections.abc import Sequence

from stead.jsonvalues import Json, weight
from stead.runtime import events as ev
from stead.runtime.bounded import Bounded
from stead.store import EventLog, EventRecord

READ_ALL = 1_000_000_000
MAX_BYTES = 64 * 1024 * 1024
"""The default bound on what the held logs weigh; one session's may weigh more
(the one kept last stays), and sessions past it are read again when they come back."""


class LogCache:
    def __init__(
        self,
        store: EventLog,
        capacity: int = 256,
        max_events: int = 50_000,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self._store = store
        self._logs: Bounded[str, tuple[int, list[Json]]] = Bounded(
            capacity, max_bytes, max_count=max_events
        )

    def since(self, session_id: str) -> int:
        """The last ``seq`` held for the session (0: nothing)."""
        return self.held(session_id)[0]

    def held(self, session_id: str) -> tuple[int, list[Json]]:
        """(last ``seq``, the log up to it). The list is never changed in place."""
        return self._logs.get(session_id) or (0, [])

    def add(self, session_id: str, since: int, fresh: Sequence[EventRecord]) -> list[Json] | None:
        """Takes ``fresh``, the whole log after ``since`` as one transaction read
        it; returns the session's log up to date, or None when the cache has
        forgotten what came before ``since`` (then ``read`` it)."""
        last_seq, log = self.held(session_id)
        if last_seq < since:
            return None
        new = [r for r in fresh if (r.seq or 0) > last_seq]
        added = [ev.as_log(r) for r in new]
        if added:
            log = log + added
            last_seq = new[-1].seq or last_seq
        grown = self._logs.weight(session_id) + sum(map(weight, added))
        self._logs.put(session_id, (last_seq, log), grown, count=len(log))
        return log

    async def read(self, session_id: str) -> list[Json]:
        """The session's whole log, as harness dicts, up to date."""
        since = self.since(session_id)
        fresh = await self._store.events_after(session_id, since, READ_ALL)
        log = self.add(session_id, since, fresh)
        # Only this task moves the session's entry on while it awaits; if it was
        # forgotten meanwhile, read it whole.
        return log if log is not None else await self.read(session_id)
