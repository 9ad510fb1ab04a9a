"""Accepting user events in memory (``_inbox.py``'s rules): into the log when the
session is idle, else into the queue; a logged message queues a run, claimed at
once when the caller gives terms."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from stead.store._answers import SETTLING_KEYS, first_answers, first_confirmations
from stead.store._inbox import Validator, check_accepting, file_in, still_waiting
from stead.store._waits import WaitLog
from stead.store.events import EventsAccepted, NewEvent
from stead.store.inmemory import events, runs, sessions
from stead.store.inmemory.tables import Tables
from stead.store.runs import STARTS_WORK, ClaimTerms


def accept(
    t: Tables,
    now: datetime,
    workspace_id: str,
    session_id: str,
    new: Sequence[NewEvent],
    validate: Validator,
    claim: ClaimTerms | None,
) -> EventsAccepted:
    session = sessions.get(t, workspace_id, session_id)
    check_accepting(session)
    validate(session, lambda event_id: events.find(t, session_id, event_id))
    new, repeated = first_answers(new, lambda use_id: events.logged_answer(t, session_id, use_id))
    new, confirmed = first_confirmations(
        new, lambda use_id: events.logged_answer(t, session_id, use_id, SETTLING_KEYS)
    )
    repeated += confirmed
    echoes, logged = file_in(
        session,
        new,
        lambda: len(t.pending.get(session_id, ())),
        lambda batch: events.enqueue(t, session_id, batch),
        lambda batch: events.append_log(t, now, session_id, batch),
        lambda: events.mark_interrupt(t, session_id),
    )
    echoes = [*repeated, *echoes]
    starts_work = any(e.type in STARTS_WORK for e in logged)
    if starts_work and session.status == "idle":
        waits = WaitLog(
            lambda: events.last_idle(t, session_id),
            lambda use_id: events.logged_answer(t, session_id, use_id, SETTLING_KEYS),
            lambda batch: events.append_log(t, now, session_id, batch),
        )
        again = still_waiting(logged, waits)
        logged += again
        starts_work = not again
    started = None
    if starts_work:
        run_id = runs.start(t, now, session_id)
        if claim is not None:
            started = runs.claim(t, now, run_id, claim, session, logged)
    return EventsAccepted(echoes, logged, starts_work, started)
