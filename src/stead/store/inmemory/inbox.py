"""Accepting user events in memory (``_inbox.py``'s rules): into the log when the
session is idle (and waits on no tool call, for a message), else into the queue;
a logged message queues a run, claimed at once when the caller gives terms."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from stead.store._answers import SETTLING_KEYS, first_answers, first_confirmations
from stead.store._inbox import Validator, check_accepting, file_in, still_waiting
from stead.store._waits import WaitLog
from stead.store.events import EventsAccepted, NewEvent
from stead.store.inmemory import agents, events, runs, sessions
from stead.store.inmemory.tables import Tables
from stead.store.runs import ClaimTerms


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
    waits = WaitLog(
        lambda: events.last_idle(t, session_id),
        lambda use_id: events.logged_answer(t, session_id, use_id, SETTLING_KEYS),
        lambda event_id: events.find(t, session_id, event_id),
        lambda batch: events.append_log(t, now, session_id, batch),
        lambda: (
            agents.get_environment(t, workspace_id, session.environment_id).config.get("type")
            == "self_hosted"
        ),
        lambda: sessions.get(t, workspace_id, session_id).status == "idle",
        lambda: events.drain(t, now, session_id),
    )
    echoes, logged, work = file_in(
        session,
        new,
        lambda: len(t.pending.get(session_id, ())),
        lambda batch: events.enqueue(t, session_id, batch),
        lambda batch: events.append_log(t, now, session_id, batch),
        lambda: events.mark_interrupt(t, session_id),
        waits,
    )
    echoes = [*repeated, *echoes]
    again = still_waiting(session, work, waits)
    logged += again
    starts_work = bool(work) and not again
    started = None
    if starts_work:
        run_id = runs.start(t, now, session_id)
        if claim is not None:
            started = runs.claim(t, now, run_id, claim, session, logged)
    return EventsAccepted(echoes, logged, starts_work, started)
