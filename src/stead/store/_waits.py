"""A session idle on tool calls (``requires_action``, spec §3.4): which of them
its users' answers leave waiting, and what an interrupt closes. A message sent
meanwhile waits in the queue for the turn to end (``_inbox.file_in``).

Both are decided in the transaction that accepts the answers or the interrupt,
from the log, with no run: answering some of the calls re-emits the idle with
the rest (a run would only log running and idle again); an interrupt ends the
turn the idle left open (its turn is not over, spec §3.4) as one sent during a
running turn ends it: each call it waits on is answered as interrupted, and the
session goes idle with ``end_turn``. Shared by the SQL store's inbox and the
in-memory one, which read the log through the callables of a ``WaitLog``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from stead.events import EventType
from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store._answers import SETTLING_KEYS, answered_use
from stead.store.base import EventRecord, NewEvent
from stead.store.errors import Conflict

INTERRUPTED = "the user interrupted the turn before this call was answered"
"""The error result of a call an interrupt closed while the session waited on it."""


@dataclass(frozen=True, slots=True)
class WaitLog:
    """The session's log as the transaction sees it."""

    last_idle: Callable[[], EventRecord | None]
    """The last ``session.status_idle`` logged, if any."""
    settlement: Callable[[str], EventRecord | None]
    """The first result or confirmation logged for a tool use, if any."""
    find: Callable[[str], EventRecord | None]
    append: Callable[[list[NewEvent]], list[EventRecord]]
    on_workers: Callable[[], bool]
    """The session's environment is self-hosted: workers run its built-in tools."""
    idle: Callable[[], bool]
    """The session has no live run, as of its lock (a status read before the
    lock may be stale: ``_sessions.locked``)."""
    drain: Callable[[], list[EventRecord]]
    """Logs what the session's queue holds (unanswered) and empties it."""


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
    if not remaining or not log.idle():
        return []
    return log.append([_idle({"type": "requires_action", "event_ids": remaining})])


def close(log: WaitLog) -> list[EventRecord]:
    """After an interrupt: each call the session waits on answered as
    interrupted, the idle that ends the turn, then what was queued for after
    the turn, logged unanswered as a running turn's interrupt logs it (no run
    is left to answer it); nothing when it waits on none."""
    uses = [use for i in waiting(log) if (use := log.find(i)) is not None]
    if not uses:
        return []
    on_workers = log.on_workers()
    answers = [_interrupted(use, on_workers) for use in uses]
    return [*log.append([*answers, _idle({"type": "end_turn"})]), *log.drain()]


def refuse_closed(new: Sequence[NewEvent], closed: Sequence[EventRecord]) -> None:
    """A 400 for an answer or confirmation in ``new`` to a call an interrupt
    before it in the same request closed (``closed``): it would be its second."""
    gone = {use for e in closed if (use := answered_use(e.type, e.body, SETTLING_KEYS))}
    for event in new:
        use = answered_use(event.type, event.body, SETTLING_KEYS)
        if use is not None and use in gone:
            raise Conflict(
                f"{use} was closed by the interrupt sent before this answer: "
                "the interrupt ended its turn",
                status=400,
            )


def settles_only(work: Sequence[EventRecord]) -> bool:
    """``work`` (events that start work) holds answers and confirmations alone."""
    return all(e.type != EventType.USER_MESSAGE for e in work)


def _interrupted(use: EventRecord, on_workers: bool) -> NewEvent:
    """The answer, of the type the runner closes an interrupted turn's calls
    with: a worker takes only a ``user.tool_result`` as one, so it never runs
    the call later (``runtime.work.in_doubt_result``)."""
    content: list[Json] = [{"type": "text", "text": INTERRUPTED}]
    if use.type == EventType.AGENT_MCP_TOOL_USE:
        body: Json = {"mcp_tool_use_id": use.id, "content": content, "is_error": True}
        return NewEvent(new_id("event"), EventType.AGENT_MCP_TOOL_RESULT, body)
    body = {"tool_use_id": use.id, "content": content, "is_error": True}
    if on_workers and use.type == EventType.AGENT_TOOL_USE:
        body["_internal"] = {"answered_by": "stead"}
        return NewEvent(new_id("event"), EventType.USER_TOOL_RESULT, body)
    return NewEvent(new_id("event"), EventType.AGENT_TOOL_RESULT, body)


def _idle(stop_reason: Json) -> NewEvent:
    return NewEvent(new_id("event"), EventType.SESSION_STATUS_IDLE, {"stop_reason": stop_reason})
