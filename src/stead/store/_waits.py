"""A session idle on tool calls (``requires_action``, spec §3.4): which of them
its users' answers leave waiting.

Decided in the transaction that accepts the answers, from the log, with no
run: answering some of the calls re-emits the idle with the rest (a run would
only log running and idle again). Shared by the SQL store's inbox and the
in-memory one, which read the log through the callables of a ``WaitLog``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stead.events import EventType
from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store.base import EventRecord, NewEvent


@dataclass(frozen=True, slots=True)
class WaitLog:
    """The session's log as the transaction sees it."""

    last_idle: Callable[[], EventRecord | None]
    """The last ``session.status_idle`` logged, if any."""
    settlement: Callable[[str], EventRecord | None]
    """The first result or confirmation logged for a tool use, if any."""
    append: Callable[[list[NewEvent]], list[EventRecord]]


def waiting(log: WaitLog) -> list[str]:
    """The calls the session's last idle waits on (``requires_action``) that
    nothing has settled since; none when it ended otherwise."""
    idle = log.last_idle()
    reason = None if idle is None else idle.body.get("stop_reason")
    if not isinstance(reason, dict) or reason.get("type") != "requires_action":
        return []
    ids = reason.get("event_ids") or []
    return [i for i in ids if isinstance(i, str) and log.settlement(i) is None]


def wait_again(log: WaitLog) -> list[EventRecord]:
    """The idle re-emitted with the calls still waited on, once answers have
    settled some of them (spec: "resolving a subset re-emits
    ``session.status_idle`` with the remaining ids"); nothing when none is left."""
    remaining = waiting(log)
    if not remaining:
        return []
    return log.append([_idle({"type": "requires_action", "event_ids": remaining})])


def settles_only(work: Sequence[EventRecord]) -> bool:
    """``work`` (events that start work) holds answers and confirmations alone."""
    return all(e.type != EventType.USER_MESSAGE for e in work)


def _idle(stop_reason: Json) -> NewEvent:
    return NewEvent(new_id("event"), EventType.SESSION_STATUS_IDLE, {"stop_reason": stop_reason})
