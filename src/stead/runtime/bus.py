"""In-process fan-out of committed events to the stream readers of a session.

Publishers call ``publish`` only after the events are committed (rule 1), from
the event loop. Each subscription buffers up to ``capacity`` notices; a reader
that falls further behind is marked ``lagged`` and re-reads from the store, so
a slow reader costs bounded memory and never slows the publisher.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import anyio

from stead.store import EventRecord


@dataclass(frozen=True, slots=True)
class Notice:
    event: EventRecord
    final: bool = False
    """The session is gone (``session.deleted``); nothing follows."""


class Subscription:
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._queue: deque[Notice] = deque()
        self._lagged = False
        self._ready = anyio.Event()

    def push(self, notice: Notice) -> None:
        if len(self._queue) >= self._capacity and not notice.final:
            self._queue.clear()
            self._lagged = True
        else:
            self._queue.append(notice)
        self._ready.set()

    async def take(self) -> tuple[list[Notice], bool]:
        """Waits for notices; returns them and whether some were dropped before them."""
        while not self._queue and not self._lagged:
            self._ready = anyio.Event()
            await self._ready.wait()
        notices = list(self._queue)
        lagged = self._lagged
        self._queue.clear()
        self._lagged = False
        return notices, lagged


class EventBus:
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._subscribers: dict[str, set[Subscription]] = {}

    @contextmanager
    def subscribe(self, session_id: str) -> Iterator[Subscription]:
        subscription = Subscription(self._capacity)
        self._subscribers.setdefault(session_id, set()).add(subscription)
        try:
            yield subscription
        finally:
            subscribers = self._subscribers.get(session_id)
            if subscribers is not None:
                subscribers.discard(subscription)
                if not subscribers:
                    del self._subscribers[session_id]

    def publish(self, session_id: str, events: Sequence[EventRecord]) -> None:
        for subscription in self._subscribers.get(session_id, ()):
            for event in events:
                subscription.push(Notice(event))

    def publish_final(self, session_id: str, event: EventRecord) -> None:
        for subscription in self._subscribers.get(session_id, ()):
            subscription.push(Notice(event, final=True))

    def reader_count(self, session_id: str) -> int:
        return len(self._subscribers.get(session_id, ()))
