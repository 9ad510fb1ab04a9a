"""Each session's log and pending queue in memory (``_events.py``'s rules): a
session's ``seq`` is the length of its log, so it has no gap and follows the
order of the writes; stamps never go back within a session."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from stead.events import EventType
from stead.ids import new_id
from stead.store._answers import ANSWER_KEYS, answered_use
from stead.store.errors import NotFound
from stead.store.events import PENDING_PHASE, EventCursor, EventFilter, EventRecord, NewEvent
from stead.store.inmemory import webhooks
from stead.store.inmemory.tables import LoggedEvent, Tables, stored
from stead.store.paging import Page, PageRequest
from stead.store.runs import STARTS_WORK


def append_log(
    t: Tables, now: datetime, session_id: str, new: Sequence[NewEvent]
) -> list[EventRecord]:
    if not new:
        return []
    if session_id not in t.sessions:
        raise NotFound("session", session_id)
    log = t.log.get(session_id, ())
    if log and log[-1].processed_at is not None:
        now = max(now, log[-1].processed_at)
    first = len(log) + 1
    added = tuple(
        LoggedEvent(e.id, e.type, stored(e.body), now, first + i) for i, e in enumerate(new)
    )
    t.log[session_id] = log + added
    records = [e.record(session_id) for e in added]
    webhooks.publish_log(t, now, session_id, records)  # the outbox changes with the log
    return records


def log_after(
    t: Tables, session_id: str, since: int, written: Sequence[EventRecord]
) -> list[EventRecord]:
    """``_events.log_after``: what was just appended when it follows ``since``."""
    if written and written[0].seq == since + 1:
        return list(written)
    return after(t, session_id, since, None)


def enqueue(t: Tables, session_id: str, new: Sequence[NewEvent]) -> list[EventRecord]:
    if not new:
        return []
    row = t.sessions[session_id]
    first = row.pending_tail + 1
    t.sessions[session_id] = replace(row, pending_tail=row.pending_tail + len(new))
    added = tuple(
        LoggedEvent(e.id, e.type, stored(e.body), None, first + i) for i, e in enumerate(new)
    )
    t.pending[session_id] = t.pending.get(session_id, ()) + added
    return [e.record(session_id) for e in added]


def drain(t: Tables, now: datetime, session_id: str) -> list[EventRecord]:
    queued = t.pending.pop(session_id, ())
    moved = [NewEvent(e.id, e.type, e.record(session_id).body) for e in queued]
    return append_log(t, now, session_id, moved)


def terminate(t: Tables, now: datetime, session_id: str) -> list[EventRecord]:
    """Sets ``terminated_at`` and logs ``session.status_terminated``."""
    t.sessions[session_id] = replace(t.sessions[session_id], terminated_at=now)
    ended = NewEvent(new_id("event"), EventType.SESSION_STATUS_TERMINATED, {})
    return append_log(t, now, session_id, [ended])


def find(t: Tables, session_id: str, event_id: str) -> EventRecord | None:
    for event in t.log.get(session_id, ()):
        if event.id == event_id:
            return event.record(session_id)
    return None


def after(t: Tables, session_id: str, seq: int, limit: int | None) -> list[EventRecord]:
    log = t.log.get(session_id, ())[max(seq, 0) :]
    chosen = log if limit is None else log[:limit]
    return [e.record(session_id) for e in chosen]


def last_seq(t: Tables, session_id: str) -> int:
    if session_id not in t.sessions:
        raise NotFound("session", session_id)
    return len(t.log.get(session_id, ()))


def find_seq(t: Tables, session_id: str, event_id: str) -> int | None:
    found = find(t, session_id, event_id)
    return None if found is None else found.seq


def _in_bounds(event: LoggedEvent, where: EventFilter) -> bool:
    stamp = event.processed_at
    assert stamp is not None
    return (
        (where.processed_gt is None or stamp > where.processed_gt)
        and (where.processed_gte is None or stamp >= where.processed_gte)
        and (where.processed_lt is None or stamp < where.processed_lt)
        and (where.processed_lte is None or stamp <= where.processed_lte)
    )


def list_(t: Tables, session_id: str, page: PageRequest, where: EventFilter) -> Page[EventRecord]:
    """``_events.list_``: the log in ``seq`` order, then the queue, from where
    the page's ``EventCursor`` says."""
    at = EventCursor.of(page)
    asc = page.order == "asc"

    def chosen(events: Sequence[LoggedEvent], after: int | None) -> list[LoggedEvent]:
        kept = [e for e in events if not where.types or e.type in where.types]
        if after is not None:
            kept = [e for e in kept if (e.number > after if asc else e.number < after)]
        return kept if asc else kept[::-1]

    log = [e for e in t.log.get(session_id, ()) if _in_bounds(e, where)]
    from_log = chosen(log, at.log_after)
    queue = [] if where.has_time_bounds else chosen(t.pending.get(session_id, ()), at.queue_after)
    if asc:
        ordered = (from_log if at.reads_log else []) + queue
    else:
        ordered = (queue if at.phase in (None, PENDING_PHASE) else []) + from_log
    items = [e.record(session_id) for e in ordered[: page.limit + 1]]
    return Page(items=items[: page.limit], has_next=len(items) > page.limit, has_prev=False)


def logged_answer(
    t: Tables, session_id: str, use_id: str, keys: Mapping[str, str] = ANSWER_KEYS
) -> EventRecord | None:
    use = find(t, session_id, use_id)
    if use is None or use.seq is None:
        return None
    for later in after(t, session_id, use.seq, None):
        if answered_use(later.type, later.body, keys) == use_id:
            return later
    return None


def mark_interrupt(t: Tables, session_id: str) -> None:
    """``_events.mark_interrupt``."""
    row = t.sessions[session_id]
    t.sessions[session_id] = replace(row, interrupt_tail=row.pending_tail)


def queued_after_interrupt(t: Tables, session_id: str) -> bool:
    """``_events.queued_after_interrupt``."""
    row = t.sessions[session_id]
    return row.interrupt_tail is not None and row.pending_tail > row.interrupt_tail


def work_logged_after(t: Tables, session_id: str, seq: int) -> bool:
    """``_events.work_logged_after``."""
    return any(e.type in STARTS_WORK for e in after(t, session_id, seq, None))


def last_idle(t: Tables, session_id: str) -> EventRecord | None:
    """``_events.last_idle``."""
    for event in reversed(t.log.get(session_id, ())):
        if event.type == EventType.SESSION_STATUS_IDLE:
            return event.record(session_id)
    return None
