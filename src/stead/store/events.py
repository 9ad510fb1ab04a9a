"""``EventLog``: each session's append-only log and its pending queue (the
narrow protocol and its records; SQL in ``_events.py`` and ``_inbox.py``).

A session's ``seq`` is gapless and follows commit order; an event is in the
log (``seq`` set) or waits in the queue (``position`` set) until a drain
moves it, in arrival order, to the log's end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from stead.jsonvalues import Json
from stead.store.paging import Page, PageRequest

if TYPE_CHECKING:
    from stead.store.runs import ClaimTerms, RunStart
    from stead.store.sessions import SessionRecord


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One session event. ``seq`` is None while the event waits in the pending queue."""

    session_id: str
    id: str
    type: str
    body: Json
    processed_at: datetime | None
    seq: int | None = None
    position: int | None = None
    """Place in the pending queue while ``seq`` is None."""


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append; the store assigns ``seq`` and stamps ``processed_at``."""

    id: str
    type: str
    body: Json


@dataclass(frozen=True, slots=True)
class EventFilter:
    types: Sequence[str] = ()
    processed_gt: datetime | None = None
    processed_gte: datetime | None = None
    processed_lt: datetime | None = None
    processed_lte: datetime | None = None

    @property
    def has_time_bounds(self) -> bool:
        return any((self.processed_gt, self.processed_gte, self.processed_lt, self.processed_lte))


PENDING_PHASE = 1
"""The first part of an events cursor key in the pending queue (0: in the log)."""


@dataclass(frozen=True, slots=True)
class EventCursor:
    """Where a page of ``list_`` starts: past ``log_after`` in the log (None:
    from its start) and past ``queue_after`` in the queue. An ascending cursor
    in the queue reads the log again past the ``seq`` it passed last; one in the
    log remembers the queue position it passed, if any."""

    phase: int | None
    log_after: int | None
    queue_after: int | None

    @classmethod
    def of(cls, page: PageRequest) -> EventCursor:
        if page.after is None:
            return cls(None, None, None)
        phase, key, *more = page.after
        third = more[0] if more else None
        if phase == PENDING_PHASE:
            return cls(phase, third, key)
        return cls(phase, key, third)

    @property
    def reads_log(self) -> bool:
        """Whether an ascending page reads the log before the queue."""
        return self.phase != PENDING_PHASE or self.log_after is not None


def event_cursor_keys(
    page: PageRequest, listed: list[EventRecord], log_top: int | None = None
) -> Callable[[EventRecord], tuple[int, ...]]:
    """The cursor key of each record of a page of ``list_events``: (0, seq)
    in the log; (1, position) in the queue. Going up, each carries what the
    next page needs to neither skip nor repeat: one in the queue, the last seq
    the listing passed (the next page reads the log past it before the queue,
    so what was logged meanwhile, queued events drained among it, is listed);
    one in the log, the queue position the listing passed (the next page's
    queue starts after it). Going down, one in the queue carries the log's
    ceiling: ``log_top`` (the last seq before the listing's first page) + 1,
    so events logged while the listing walks the queue (queued ones drained,
    a turn's end) are not listed below the queue it already listed."""
    at = EventCursor.of(page)
    seqs = [r.seq for r in listed if r.seq is not None]
    positions = [r.position for r in listed if r.seq is None and r.position is not None]
    floor = max(seqs) if seqs else (at.log_after if page.after is not None else 0)
    queued = max(positions) if positions else at.queue_after
    ceiling = at.log_after if at.phase == PENDING_PHASE else None
    if ceiling is None and log_top is not None:
        ceiling = log_top + 1

    def key(record: EventRecord) -> tuple[int, ...]:
        if record.seq is not None:
            if page.order == "asc" and queued is not None:
                return (0, record.seq, queued)
            return (0, record.seq)
        if page.order == "asc" and floor is not None:
            return (1, record.position or 0, floor)
        if page.order == "desc" and ceiling is not None:
            return (1, record.position or 0, ceiling)
        return (1, record.position or 0)

    return key


@dataclass(frozen=True, slots=True)
class EventsAccepted:
    """What ``accept_user_events`` did: the echoes, and which of them went to the log."""

    echoes: list[EventRecord] = field(default_factory=list)
    logged: list[EventRecord] = field(default_factory=list)
    starts_work: bool = False
    """A run was queued for what was logged: the agent loop has work."""
    started: RunStart | None = None
    """The queued run, already claimed on the terms the caller gave."""

    @property
    def published(self) -> list[EventRecord]:
        """What readers learn of: the echoes, and what the store logged with them
        for the session (an idle re-emitted with the calls it still waits on, an
        interrupt's answers to them and its idle), in the log's order; never in
        the answer to the request."""
        echoed = {e.id for e in self.echoes}
        own = [e for e in self.logged if e.id not in echoed]
        if not own:
            return self.echoes
        return sorted([*self.echoes, *own], key=lambda e: (e.seq is None, e.seq or 0))


class EventLog(Protocol):
    async def accept_user_events(
        self,
        workspace_id: str,
        session_id: str,
        events: Sequence[NewEvent],
        validate: Callable[[SessionRecord, Callable[[str], EventRecord | None]], None],
        claim: ClaimTerms | None = None,
    ) -> EventsAccepted:
        """Stores user events: into the log when the session has no live run,
        else into the pending queue (``processed_at`` None). ``validate`` sees the
        session and a lookup of logged events by id, inside the transaction.
        With ``claim``, a run queued for the events is also claimed on those
        terms in the same transaction (``EventsAccepted.started``)."""
        ...

    async def append_events(
        self, session_id: str, events: Sequence[NewEvent]
    ) -> list[EventRecord]: ...
    async def drain_pending(self, session_id: str) -> list[EventRecord]:
        """Moves every pending event into the log, in arrival order."""
        ...

    async def list_events(
        self, workspace_id: str, session_id: str, page: PageRequest, where: EventFilter
    ) -> Page[EventRecord]:
        """The log in ``seq`` order, then the queue (time bounds leave the queue
        out). Cursor keys are ``(0, seq)`` in the log and ``(1, position)`` in
        the queue, an ascending one with a third part (``EventCursor``);
        ``after`` only (no ``has_prev``)."""
        ...

    async def events_after(self, session_id: str, seq: int, limit: int) -> list[EventRecord]: ...
    async def last_seq(self, session_id: str) -> int: ...
    async def find_event_seq(self, session_id: str, event_id: str) -> int | None: ...
