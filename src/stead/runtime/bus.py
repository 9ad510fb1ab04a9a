"""Fan-out of committed events to a session's stream readers, and the wake-ups
that pass between the processes serving one store.

``Bus`` is the interface; ``LocalBus`` serves one process (SQLite) and
``SharedBus`` (``sharedbus.py``) several on one PostgreSQL. Publishers call
``publish`` only after the events are committed (rule 1), from the event loop.
Each subscription buffers up to ``capacity`` notices; a reader that falls
further behind is marked ``lagged`` and re-reads from the store, so a slow
reader costs bounded memory and never slows the publisher. Events written by
another process arrive as a hint ("the log reaches seq N"), never as bodies:
the reader reads them from the store, as it does after a lag.

Stream previews (``Preview``, spec §3.7) reach only the readers in the process
running the turn that asked for that kind, and are dropped rather than queued
past capacity: they are best-effort, and the logged event carries the whole
content anyway.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from stead.jsonvalues import Json
from stead.store import EventRecord


@dataclass(frozen=True, slots=True)
class Notice:
    event: EventRecord
    final: bool = False
    """The session is gone (``session.deleted``); nothing follows."""


@dataclass(frozen=True, slots=True)
class Preview:
    """A stream-only ``event_start`` or ``event_delta``: never logged, never replayed."""

    previewed: str
    """The type of the event it previews, which readers opt in to (``event_deltas``)."""
    type: str
    body: Json

    def wire(self) -> Json:
        return {"type": self.type, **self.body}


class Subscription:
    def __init__(self, capacity: int, previews: frozenset[str] = frozenset()) -> None:
        self._capacity = capacity
        self._previews = previews
        self._queue: deque[Notice | Preview] = deque()
        self._lagged = False
        self._known = 0
        """The highest ``seq`` this reader has been handed or has read itself."""
        self._ready = anyio.Event()

    def push(self, notice: Notice) -> None:
        if len(self._queue) >= self._capacity and not notice.final:
            # Previews make room first: they are best-effort, a lag costs a re-read.
            self._queue = deque(n for n in self._queue if isinstance(n, Notice))
        if len(self._queue) >= self._capacity and not notice.final:
            self._queue.clear()
            self._lagged = True
        else:
            self._queue.append(notice)
            self._known = max(self._known, notice.event.seq or 0)
        self._ready.set()

    def push_preview(self, preview: Preview) -> None:
        if preview.previewed in self._previews and len(self._queue) < self._capacity:
            self._queue.append(preview)
            self._ready.set()

    def hint(self, seq: int) -> None:
        """The log reaches ``seq`` (written elsewhere): read it if it is news."""
        if seq > self._known:
            self.nudge()

    def nudge(self) -> None:
        """Read the store again, whatever came before (a notice may have been missed)."""
        self._lagged = True
        self._ready.set()

    def seen(self, seq: int) -> None:
        """The reader read the log up to ``seq`` from the store."""
        self._known = max(self._known, seq)

    async def take(self) -> tuple[list[Notice | Preview], bool]:
        """Waits for notices; returns them and whether the reader must re-read the
        store (notices were dropped, or the log grew elsewhere)."""
        while not self._queue and not self._lagged:
            self._ready = anyio.Event()
            await self._ready.wait()
        notices = list(self._queue)
        lagged = self._lagged
        self._queue.clear()
        self._lagged = False
        return notices, lagged


class Peers(Protocol):
    """What a notice from another process asks of this one."""

    def wake(self, session_id: str) -> None:
        """A run of the session was queued: claim it if nobody has."""
        ...

    def interrupt(self, session_id: str) -> None:
        """A user interrupted the session: stop its turn if it runs here."""
        ...

    def credentials_changed(self, vault_id: str) -> None:
        """A credential of the vault changed: refresh the sandboxes served here."""
        ...

    def sandbox_destroyed(self, sandbox_id: str, incarnation: str) -> None:
        """Another process destroyed the sandbox of the lease that started at
        ``incarnation``: let go of what is held of it here."""
        ...

    def restage(self, session_id: str) -> None:
        """The session's resources changed through another process: its sandbox,
        if served here, is staged again before its next use."""
        ...

    def reconnected(self, read: Sequence[str]) -> None:
        """Notices sent while this process was not listening are lost: look in
        the store for what they would have asked (an interrupt of a turn here,
        the deletion of a session whose events are ``read`` here)."""
        ...


class Bus(Protocol):
    def subscribe(
        self, session_id: str, previews: frozenset[str] = frozenset()
    ) -> AbstractContextManager[Subscription]:
        """A subscription to the session's notices while the context lasts, with
        previews of the event types in ``previews``."""
        ...

    def publish(self, session_id: str, events: Sequence[EventRecord]) -> None:
        """Committed events (or pending-queue echoes): to readers here at once, and
        to other processes as "the log reaches seq N" (echoes stay here)."""
        ...

    def preview(self, session_id: str, preview: Preview) -> None:
        """A preview of an event the turn running here is producing: to readers
        here that asked for its kind (never to other processes)."""
        ...

    def publish_final(self, session_id: str, event: EventRecord) -> None:
        """The session was deleted: every reader, here and elsewhere, ends with ``event``."""
        ...

    def run_queued(self, session_id: str) -> None:
        """Tells the other processes a run of the session waits to be claimed."""
        ...

    def interrupt(self, session_id: str) -> None:
        """Tells the other processes to interrupt the session's turn."""
        ...

    def credentials_changed(self, vault_id: str) -> None:
        """Tells the other processes a credential of ``vault_id`` changed."""
        ...

    def resources_changed(self, session_id: str) -> None:
        """Tells the other processes the session's resources changed."""
        ...

    def sandbox_destroyed(self, sandbox_id: str, incarnation: str) -> None:
        """Tells the other processes this one destroyed the sandbox of the lease
        that started at ``incarnation`` (its ``created_at``, ISO)."""
        ...

    async def serve(
        self, peers: Peers, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Delivers other processes' notices to ``peers`` and this process's
        readers until cancelled; started once notices flow (or once it gave up
        waiting for the database, healing by polling meanwhile)."""
        ...

    def reader_count(self, session_id: str) -> int: ...


class LocalBus:
    """The bus of a process that is the only one on its store."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._subscribers: dict[str, set[Subscription]] = {}

    @contextmanager
    def subscribe(
        self, session_id: str, previews: frozenset[str] = frozenset()
    ) -> Iterator[Subscription]:
        subscription = Subscription(self._capacity, previews)
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

    def preview(self, session_id: str, preview: Preview) -> None:
        for subscription in self._subscribers.get(session_id, ()):
            subscription.push_preview(preview)

    def publish_final(self, session_id: str, event: EventRecord) -> None:
        for subscription in self._subscribers.get(session_id, ()):
            subscription.push(Notice(event, final=True))

    def read(self) -> list[str]:
        """The sessions with readers here."""
        return list(self._subscribers)

    def hint(self, session_id: str, seq: int) -> None:
        for subscription in self._subscribers.get(session_id, ()):
            subscription.hint(seq)

    def nudge_all(self) -> None:
        for subscriptions in self._subscribers.values():
            for subscription in subscriptions:
                subscription.nudge()

    # Alone on the store, this process is every peer: its runtime acts itself.
    def run_queued(self, session_id: str) -> None:
        pass

    def interrupt(self, session_id: str) -> None:
        pass

    def credentials_changed(self, vault_id: str) -> None:
        pass

    def resources_changed(self, session_id: str) -> None:
        pass

    def sandbox_destroyed(self, sandbox_id: str, incarnation: str) -> None:
        pass

    async def serve(
        self, peers: Peers, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()

    def reader_count(self, session_id: str) -> int:
        return len(self._subscribers.get(session_id, ()))
