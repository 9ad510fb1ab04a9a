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


@dataclass(frozen=True, slots=True)
class EventsAccepted:
    """What ``accept_user_events`` did: the echoes, and which of them went to the log."""

    echoes: list[EventRecord] = field(default_factory=list)
    logged: list[EventRecord] = field(default_factory=list)
    starts_work: bool = False
    """A run was queued for what was logged: the agent loop has work."""
    started: RunStart | None = None
    """The queued run, already claimed on the terms the caller gave."""


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
        the queue; ``after`` only (no ``has_prev``)."""
        ...

    async def events_after(self, session_id: str, seq: int, limit: int) -> list[EventRecord]: ...
    async def last_seq(self, session_id: str) -> int: ...
    async def find_event_seq(self, session_id: str, event_id: str) -> int | None: ...
