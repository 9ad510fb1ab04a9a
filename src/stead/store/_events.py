"""The event log and the pending queue of one session.

``seq`` comes from ``sessions.last_seq`` bumped in the same transaction as the
insert, so a session's log has no gap and no reordering. Pending events get a
queue position from ``sessions.pending_tail`` the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, Update, bindparam, delete, insert, select, text, update

from stead.events import EventType
from stead.ids import new_id
from stead.store import _locks, _webhooks
from stead.store._compiled import compiled
from stead.store.base import EventFilter, EventRecord, NewEvent, Page, PageRequest
from stead.store.errors import NotFound
from stead.store.events import PENDING_PHASE, EventCursor
from stead.store.runs import STARTS_WORK
from stead.store.tables import events, pending, sessions


def _logged(row: Row[Any]) -> EventRecord:
    return EventRecord(
        session_id=row.session_id,
        id=row.id,
        type=row.type,
        body=row.body,
        processed_at=row.processed_at,
        seq=row.seq,
    )


def _queued(row: Row[Any]) -> EventRecord:
    return EventRecord(
        session_id=row.session_id,
        id=row.id,
        type=row.type,
        body=row.body,
        processed_at=None,
        position=row.position,
    )


def _bump_statement(column: str) -> Update:
    col = sessions.c[column]
    return (
        update(sessions)
        .where(sessions.c.id == bindparam("session_id"))
        .values({col: col + bindparam("n")})
        .returning(col)
    )


def _bump(conn: Connection, session_id: str, column: str, n: int) -> int:
    """Reserves ``n`` numbers of ``column`` for ``session_id``; returns the last one."""
    statement = compiled(conn, f"bump.{column}", lambda: _bump_statement(column))
    cursor = statement.execute(conn, {"session_id": session_id, "n": n})
    row = cursor.fetchone()
    cursor.close()
    if row is None:
        raise NotFound("session", session_id)
    return int(row[0])


def append_log(
    conn: Connection, now: datetime, session_id: str, new: Sequence[NewEvent]
) -> list[EventRecord]:
    """Appends ``new`` to the session's log. On PostgreSQL the caller holds the
    session's lock (``_locks.session``) or made the session in this transaction."""
    if not new:
        return []
    if conn.dialect.name == "sqlite":
        first = _bump(conn, session_id, "last_seq", len(new)) - len(new) + 1
        records = [
            EventRecord(session_id, e.id, e.type, e.body, now, seq=first + i)
            for i, e in enumerate(new)
        ]
        compiled(conn, "insert.events", lambda: insert(events)).execute_many(
            conn, [_event_row(r) for r in records]
        )
    else:
        records = _appended(conn, now, session_id, new)
    _webhooks.publish_log(conn, now, session_id, records)  # the outbox commits with the log
    return records


def append(
    conn: Connection, now: datetime, session_id: str, new: Sequence[NewEvent]
) -> list[EventRecord]:
    """``append_log`` for a caller that holds no lock yet."""
    _locks.session(conn, session_id)
    return append_log(conn, now, session_id, new)


def _event_row(record: EventRecord) -> dict[str, Any]:
    return {
        "session_id": record.session_id,
        "seq": record.seq,
        "id": record.id,
        "type": record.type,
        "body": record.body,
        "processed_at": record.processed_at,
    }


def _append_statement() -> Any:
    return (
        text(
            """
            WITH bumped AS (
                UPDATE sessions SET last_seq = last_seq + :n WHERE id = :session_id
                RETURNING last_seq - :n AS before
            )
            INSERT INTO events (session_id, seq, id, type, body, processed_at)
            SELECT :session_id, bumped.before + new.n, new.id, new.type, new.body,
                GREATEST(:now, (SELECT processed_at FROM events
                                WHERE session_id = :session_id AND seq = bumped.before))
            FROM bumped, ROWS FROM (
                unnest(CAST(:ids AS text[])),
                unnest(CAST(:types AS text[])),
                jsonb_array_elements(:bodies)
            ) WITH ORDINALITY AS new (id, type, body, n)
            RETURNING seq, processed_at
            """
        )
        .bindparams(
            bindparam("now", type_=events.c.processed_at.type),
            bindparam("bodies", type_=events.c.body.type),
        )
        .columns(events.c.seq, events.c.processed_at)
    )


def _appended(
    conn: Connection, now: datetime, session_id: str, new: Sequence[NewEvent]
) -> list[EventRecord]:
    """``new`` logged on PostgreSQL in one statement (one round trip): its seqs
    taken, each stamped ``now`` or the stamp of the event before if that is
    later. With concurrent writers a transaction may read its clock before
    another that then takes the next seq first; a session's stamps still follow
    its seq order. The event before is seen because this statement starts after
    the caller took the session's lock, so after its last writer committed."""
    rows = compiled(conn, "events.append", _append_statement).fetch(
        conn,
        {
            "session_id": session_id,
            "n": len(new),
            "now": now,
            "ids": [e.id for e in new],
            "types": [e.type for e in new],
            "bodies": [e.body for e in new],
        },
    )
    if not rows:
        raise NotFound("session", session_id)
    first, stamp = min(r.seq for r in rows), rows[0].processed_at
    return [
        EventRecord(session_id, e.id, e.type, e.body, stamp, seq=first + i)
        for i, e in enumerate(new)
    ]


def log_after(
    conn: Connection, session_id: str, since: int, written: Sequence[EventRecord]
) -> list[EventRecord]:
    """The log after ``since``, given ``written``: what this transaction appended
    last, in order. When ``written`` follows on at once from ``since`` it is that
    log (a session's seqs are handed out under its row's lock, so no other
    transaction's event can fall between or after them); else it is read."""
    if written and written[0].seq == since + 1:
        return list(written)
    return after(conn, session_id, since, READ_ALL)


def enqueue(
    conn: Connection, now: datetime, session_id: str, new: Sequence[NewEvent]
) -> list[EventRecord]:
    if not new:
        return []
    first = _bump(conn, session_id, "pending_tail", len(new)) - len(new) + 1
    records = [
        EventRecord(session_id, e.id, e.type, e.body, None, position=first + i)
        for i, e in enumerate(new)
    ]
    compiled(conn, "insert.pending", lambda: insert(pending)).execute_many(
        conn,
        [
            {
                "session_id": session_id,
                "position": r.position,
                "id": r.id,
                "type": r.type,
                "body": r.body,
                "received_at": now,
            }
            for r in records
        ],
    )
    return records


def pending_count(conn: Connection, session_id: str) -> int:
    rows = conn.execute(select(pending.c.position).where(pending.c.session_id == session_id))
    return len(rows.all())


def _pending_statement() -> Any:
    return (
        select(pending)
        .where(pending.c.session_id == bindparam("session_id"))
        .order_by(pending.c.position)
    )


def drain(conn: Connection, now: datetime, session_id: str) -> list[EventRecord]:
    _locks.session(conn, session_id)  # no event enqueued between the read and the delete
    rows = compiled(conn, "pending.all", _pending_statement).fetch(conn, {"session_id": session_id})
    if not rows:
        return []
    conn.execute(delete(pending).where(pending.c.session_id == session_id))
    return append_log(conn, now, session_id, [NewEvent(r.id, r.type, r.body) for r in rows])


def terminate(conn: Connection, now: datetime, session_id: str) -> list[EventRecord]:
    """Ends the session for good: ``terminated_at`` set, ``session.status_terminated``
    logged. The caller holds the session's lock and has logged what led to it."""
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(terminated_at=now))
    ended = NewEvent(new_id("event"), EventType.SESSION_STATUS_TERMINATED, {})
    return append_log(conn, now, session_id, [ended])


def _find_statement() -> Any:
    return select(events).where(
        events.c.session_id == bindparam("session_id"), events.c.id == bindparam("event_id")
    )


def find(conn: Connection, session_id: str, event_id: str) -> EventRecord | None:
    statement = compiled(conn, "events.find", _find_statement)
    rows = statement.fetch(conn, {"session_id": session_id, "event_id": event_id})
    return _logged(rows[0]) if rows else None


def _after_statement() -> Any:
    return (
        select(events)
        .where(events.c.session_id == bindparam("session_id"), events.c.seq > bindparam("seq"))
        .order_by(events.c.seq)
        .limit(bindparam("limit"))
    )


READ_ALL = 1_000_000_000
"""A ``limit`` for ``after`` that reads the whole rest of a log."""


def after(conn: Connection, session_id: str, seq: int, limit: int) -> list[EventRecord]:
    statement = compiled(conn, "events.after", _after_statement)
    rows = statement.fetch(conn, {"session_id": session_id, "seq": seq, "limit": limit})
    return [_logged(r) for r in rows]


def last_seq(conn: Connection, session_id: str) -> int:
    value = conn.execute(
        select(sessions.c.last_seq).where(sessions.c.id == session_id)
    ).scalar_one_or_none()
    if value is None:
        raise NotFound("session", session_id)
    return int(value)


def list_(
    conn: Connection, session_id: str, page: PageRequest, where: EventFilter
) -> Page[EventRecord]:
    """The log in ``seq`` order, then the pending queue (never processed, so it
    sorts after every processed event). Cursor keys are ``(phase, seq|position)``;
    an ascending one may carry a third part (``EventCursor``): in the queue, the
    last ``seq`` the listing passed, so the page after it reads the log past
    that first and events logged since (queued ones drained among them) are
    listed, not skipped; in the log, the queue position already listed, so the
    queue is not listed again from its start."""
    at = EventCursor.of(page)
    with_pending = not where.has_time_bounds
    log = select(events).where(events.c.session_id == session_id)
    queue = select(pending).where(pending.c.session_id == session_id)
    if where.types:
        log = log.where(events.c.type.in_(list(where.types)))
        queue = queue.where(pending.c.type.in_(list(where.types)))
    for value, op in (
        (where.processed_gt, "__gt__"),
        (where.processed_gte, "__ge__"),
        (where.processed_lt, "__lt__"),
        (where.processed_lte, "__le__"),
    ):
        if value is not None:
            log = log.where(getattr(events.c.processed_at, op)(value))

    def from_log(room: int) -> list[EventRecord]:
        stmt = log
        if at.log_after is not None:
            seq = events.c.seq
            stmt = stmt.where(seq > at.log_after if page.order == "asc" else seq < at.log_after)
        order = events.c.seq.asc() if page.order == "asc" else events.c.seq.desc()
        return [_logged(r) for r in conn.execute(stmt.order_by(order).limit(room)).all()]

    def from_queue(room: int) -> list[EventRecord]:
        stmt = queue
        if at.queue_after is not None:
            pos = pending.c.position
            stmt = stmt.where(pos > at.queue_after if page.order == "asc" else pos < at.queue_after)
        order = pending.c.position.asc() if page.order == "asc" else pending.c.position.desc()
        return [_queued(r) for r in conn.execute(stmt.order_by(order).limit(room)).all()]

    want = page.limit + 1
    items: list[EventRecord] = []
    if page.order == "asc":
        if at.reads_log:
            items += from_log(want)
        if with_pending and len(items) < want:
            items += from_queue(want - len(items))
    else:
        if with_pending and at.phase in (None, PENDING_PHASE):
            items += from_queue(want)
        if len(items) < want:
            items += from_log(want - len(items))
    return Page(items=items[: page.limit], has_next=len(items) > page.limit, has_prev=False)


def mark_interrupt(conn: Connection, session_id: str) -> None:
    """Marks the queue's tail as where an interrupt landed (``_inbox.file_in``)."""
    conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(interrupt_tail=sessions.c.pending_tail)
    )


def queued_after_interrupt(conn: Connection, session_id: str) -> bool:
    """Whether the queue took events past the last interrupt's mark."""
    row = conn.execute(
        select(sessions.c.pending_tail, sessions.c.interrupt_tail).where(
            sessions.c.id == session_id
        )
    ).one()
    return row.interrupt_tail is not None and row.pending_tail > row.interrupt_tail


def work_logged_after(conn: Connection, session_id: str, seq: int) -> bool:
    """Whether an event that starts work (``STARTS_WORK``) is in the log past ``seq``."""
    found = conn.execute(
        select(events.c.seq)
        .where(
            events.c.session_id == session_id,
            events.c.seq > seq,
            events.c.type.in_(sorted(STARTS_WORK)),
        )
        .limit(1)
    )
    return found.first() is not None


def _last_idle_statement() -> Any:
    return (
        select(events)
        .where(
            events.c.session_id == bindparam("session_id"),
            events.c.type == EventType.SESSION_STATUS_IDLE,
        )
        .order_by(events.c.seq.desc())
        .limit(1)
    )


def last_idle(conn: Connection, session_id: str) -> EventRecord | None:
    """The session's last ``session.status_idle``, if it logged one. Compiled
    once per connection: every message to an idle session asks it (whether the
    session waits on tool calls), and through ``conn.execute`` it cost a third
    of a millisecond, half the transaction's own work."""
    statement = compiled(conn, "events.last_idle", _last_idle_statement)
    rows = statement.fetch(conn, {"session_id": session_id})
    return _logged(rows[0]) if rows else None
