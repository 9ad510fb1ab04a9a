"""Accepting user events: into the log when the session is idle, else into the
queue; a message also waits in the queue while the session waits on tool calls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from itertools import groupby

from sqlalchemy import Connection

from stead import usage as accounting
from stead.events import EventType
from stead.store import (
    _answers,
    _claims,
    _environments,
    _events,
    _locks,
    _runs,
    _sessions,
    _waits,
)
from stead.store.base import ClaimTerms, EventRecord, EventsAccepted, NewEvent, SessionRecord
from stead.store.errors import Conflict
from stead.store.runs import STARTS_WORK

QUEUED_TYPES = frozenset({EventType.USER_MESSAGE, "system.message"})
"""Types that wait for the running turn (or one idle on tool calls) to end.
Everything else (interrupts, tool results, confirmations, outcomes) is processed
on receipt (spec §3.0)."""


MAX_PENDING = 1000

Validator = Callable[[SessionRecord, Callable[[str], EventRecord | None]], None]


def accept(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    session_id: str,
    new: Sequence[NewEvent],
    validate: Validator,
    claim: ClaimTerms | None = None,
) -> EventsAccepted:
    if any(e.type in QUEUED_TYPES or e.type == EventType.USER_INTERRUPT for e in new):
        # Busy or idle is decided on the session's state as of the lock: a run
        # that finishes meanwhile drains the queue only after this commits, and
        # an interrupt closes the calls of an idle session only.
        _locks.session(conn, session_id)
        session = _sessions.get(conn, workspace_id, session_id)
    else:
        # Nothing here waits for the turn, so the status decides nothing: the
        # lock and the read are one statement.
        session = _sessions.locked(conn, workspace_id, session_id)
    check_accepting(session)
    validate(session, lambda event_id: _events.find(conn, session_id, event_id))
    new, repeated = _answers.first_answers(
        new, lambda use_id: _answers.logged_answer(conn, session_id, use_id)
    )
    new, confirmed = _answers.first_confirmations(
        new, lambda use_id: _answers.logged_answer(conn, session_id, use_id, _answers.SETTLING_KEYS)
    )
    repeated += confirmed
    waits = _waits.WaitLog(
        lambda: _events.last_idle(conn, session_id),
        lambda use_id: _answers.logged_answer(conn, session_id, use_id, _answers.SETTLING_KEYS),
        lambda event_id: _events.find(conn, session_id, event_id),
        lambda batch: _events.append_log(conn, now, session_id, batch),
        lambda: (
            _environments.get(conn, workspace_id, session.environment_id).config.get("type")
            == "self_hosted"
        ),
        lambda: _sessions.get(conn, workspace_id, session_id).status == "idle",
        lambda: _events.drain(conn, now, session_id),
    )
    echoes, logged, work = file_in(
        session,
        new,
        lambda: _events.pending_count(conn, session_id),
        lambda batch: _events.enqueue(conn, now, session_id, batch),
        lambda batch: _events.append_log(conn, now, session_id, batch),
        lambda: _events.mark_interrupt(conn, session_id),
        waits,
    )
    echoes = [*repeated, *echoes]
    again = still_waiting(session, work, waits)
    logged += again
    starts_work = bool(work) and not again
    started = None
    if starts_work:
        run_id = _runs.start(conn, now, session_id)
        if claim is not None:
            # Taken before the ack, in this commit: the loop needs no second
            # transaction to begin, and a crash after the ack leaves the run
            # owned by a dead process, which recovery re-queues as for any run.
            started = _claims.claim(conn, now, run_id, claim, session, logged)
    return EventsAccepted(echoes, logged, starts_work, started)


def still_waiting(
    session: SessionRecord, work: Sequence[EventRecord], waits: _waits.WaitLog
) -> list[EventRecord]:
    """For answers and confirmations to an idle session (``work``, the events
    that start work the request logged, no message among them): the idle
    re-emitted with the calls it still waits on, if any, instead of a run that
    would only say running and idle again."""
    if not work or session.status != "idle" or not _waits.settles_only(work):
        return []
    return _waits.wait_again(waits)


def check_accepting(session: SessionRecord) -> None:
    if session.archived_at is not None:
        raise Conflict(f"session {session.id} is archived; it accepts no new events")
    if session.terminated_at is not None:
        raise Conflict(f"session {session.id} is terminated; it accepts no new events")


Batch = Callable[[list[NewEvent]], list[EventRecord]]


def file_in(
    session: SessionRecord,
    new: Sequence[NewEvent],
    pending_count: Callable[[], int],
    enqueue: Batch,
    append: Batch,
    mark_interrupt: Callable[[], None],
    waits: _waits.WaitLog,
) -> tuple[list[EventRecord], list[EventRecord], list[EventRecord]]:
    """Files ``new`` into the session's queue (what waits for the turn) or its
    log, in the request's order; returns the echoes, everything logged (the
    logged echoes and what closing a wait logged after them), and the logged
    events that start work since the last turn an interrupt closed.
    A message waits for a running turn, and for a turn idle on tool calls
    (``_waits_too``): that turn is not over (spec §3.4) until its calls are
    answered and it ends, and the run that ends it answers the queue.
    Paused at the budget (idle at its cap) an interrupt is accepted and ignored,
    not logged (spec §3.1); a turn still running at the cap (its last model
    request crossed it, its tools still run) is stopped by one as any other.
    An interrupt logged marks the queue's tail (``mark_interrupt``, after what
    the request queued before it): the turn it ends answers what was queued past
    the mark, sent after the interrupt (``RunWrite.answer_after_interrupt``).
    An interrupt to an idle session closes the calls it waits on
    (``_waits.close``), which logs the queue unanswered: what the request logged
    before it is left unanswered, as a running turn's interrupt leaves it."""
    busy = session.status != "idle"
    if not busy and accounting.at_cap(session.budget, session.usage):
        new = [e for e in new if e.type != EventType.USER_INTERRUPT]
    echoes: list[EventRecord] = []
    logged: list[EventRecord] = []
    work: list[EventRecord] = []
    closed: list[EventRecord] = []
    # Keep the request's order: a run of queued events, then a run of logged
    # ones, ...; whether a run of messages is queued is decided when it is
    # reached, on the log the events before it left.
    for may_queue, group in groupby(new, key=lambda e: e.type in QUEUED_TYPES):
        batch = list(group)
        if may_queue and (busy or _waits_too(batch, waits, bool(work), pending_count)):
            if pending_count() + len(batch) > MAX_PENDING:
                raise Conflict(
                    f"session {session.id} already has {MAX_PENDING} queued events; "
                    "wait for the running turn to drain them",
                    status=429,
                )
            echoes += enqueue(batch)
            continue
        for part in _through_interrupts(batch):
            _waits.refuse_closed(part, closed)
            records = append(part)
            echoes += records
            logged += records
            work += [r for r in records if r.type in STARTS_WORK]
            if part[-1].type != EventType.USER_INTERRUPT:
                continue
            mark_interrupt()
            ended = [] if busy else _waits.close(waits)
            if ended:
                logged += ended
                closed += ended
                work = []  # the turn the work was for is over
                # A message this request queued is echoed as the close logged it.
                flushed = {e.id: e for e in ended}
                echoes = [flushed.get(e.id, e) for e in echoes]
    return echoes, logged, work


def _waits_too(
    batch: Sequence[NewEvent],
    waits: _waits.WaitLog,
    resumed: bool,
    pending_count: Callable[[], int],
) -> bool:
    """Whether ``batch`` (messages, perhaps a trailing ``system.message``) sent
    to an idle session waits in the queue: for the turn whose calls the session
    waits on, or (``resumed``: answers before it in the request resumed that
    turn) behind the messages that waited for it, first in, first answered.
    A ``system.message`` alone follows the answer it accompanies into the log
    (spec §3.1: during ``requires_action`` it trails a tool result)."""
    if batch[0].type != EventType.USER_MESSAGE:
        return False
    return (resumed and pending_count() > 0) or bool(_waits.waiting(waits))


def _through_interrupts(batch: list[NewEvent]) -> list[list[NewEvent]]:
    """``batch`` cut after each interrupt."""
    parts: list[list[NewEvent]] = [[]]
    for event in batch:
        parts[-1].append(event)
        if event.type == EventType.USER_INTERRUPT:
            parts.append([])
    return [part for part in parts if part]
