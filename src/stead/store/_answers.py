"""Answers to tool uses in a session's log: a tool use is answered once, and
confirmed once. Shared by the inbox (what users send), the run's writes (what
stead closes) and the in-memory store."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from sqlalchemy import Connection, select

from stead.events import EventType
from stead.jsonvalues import Json
from stead.store import _events
from stead.store.base import EventRecord, NewEvent
from stead.store.errors import Conflict
from stead.store.tables import events

ANSWER_KEYS: dict[str, str] = {
    EventType.USER_TOOL_RESULT: "tool_use_id",
    EventType.AGENT_TOOL_RESULT: "tool_use_id",
    EventType.USER_CUSTOM_TOOL_RESULT: "custom_tool_use_id",
}
"""Events that answer a tool use, and the field that names it (stead answers a
custom tool use itself, with an ``agent.tool_result``, when a turn is interrupted)."""
SETTLING_KEYS: dict[str, str] = {
    EventType.USER_TOOL_CONFIRMATION: "tool_use_id",
    **ANSWER_KEYS,
    EventType.AGENT_MCP_TOOL_RESULT: "mcp_tool_use_id",
}
"""Events after which a tool use takes no confirmation: one, or its result."""


def answered_use(event_type: str, body: Json, keys: Mapping[str, str] = ANSWER_KEYS) -> str | None:
    """The tool use an event answers (or, with ``SETTLING_KEYS``, settles), if any."""
    key = keys.get(event_type)
    use_id = None if key is None else body.get(key)
    return use_id if isinstance(use_id, str) else None


def unanswered(
    new: Sequence[NewEvent], logged_answer: Callable[[str], EventRecord | None]
) -> list[NewEvent]:
    """``new`` without the answers whose tool use has one logged already."""
    return [
        e
        for e in new
        if (use_id := answered_use(e.type, e.body)) is None or logged_answer(use_id) is None
    ]


def first_confirmations(
    new: Sequence[NewEvent], logged_settlement: Callable[[str], EventRecord | None]
) -> tuple[list[NewEvent], list[EventRecord]]:
    """``new`` without confirmations that repeat one logged (or sent before in
    ``new``), and the logged ones they repeat: a retried confirmation is taken
    once. ``Conflict`` (a 400) for one that differs from the confirmation
    before it, or for a tool use that has its result: logged, it would start a
    turn with nothing to do. ``logged_settlement(tool_use_id)`` is the first
    confirmation or result the log holds for it, if any."""
    kept: list[NewEvent] = []
    repeated: list[EventRecord] = []
    given: dict[str, Json] = {}
    for event in new:
        if event.type != EventType.USER_TOOL_CONFIRMATION:
            kept.append(event)
            continue
        use_id = answered_use(event.type, event.body, SETTLING_KEYS)
        if use_id is None:  # refused before the store, by the schema's check
            kept.append(event)
            continue
        earlier = logged_settlement(use_id)
        before = earlier.body if earlier is not None else given.get(use_id)
        if before is None:
            given[use_id] = event.body
            kept.append(event)
        elif earlier is not None and earlier.type != EventType.USER_TOOL_CONFIRMATION:
            raise Conflict(f"tool_use_id: {use_id} already has a result", status=400)
        elif before.get("result") != event.body.get("result"):
            raise Conflict(
                f"tool_use_id: {use_id} was already confirmed with result {before.get('result')!r}",
                status=400,
            )
        elif earlier is not None and earlier not in repeated:
            repeated.append(earlier)
    return kept, repeated


def first_answers(
    new: Sequence[NewEvent], logged_answer: Callable[[str], EventRecord | None]
) -> tuple[list[NewEvent], list[EventRecord]]:
    """``new`` without the results whose tool use already has a result (a worker
    that reported twice, or after stead settled the call; a client that sent a
    custom tool's result again), and the logged results they repeat: a result is
    recorded once. ``Conflict`` (a 400) for a custom tool's result when stead
    closed the call itself (an interrupted turn): it was answered, not by that result.
    ``logged_answer(tool_use_id)`` is the result the log holds, if any."""
    kept: list[NewEvent] = []
    repeated: list[EventRecord] = []
    seen: set[str] = set()
    for event in new:
        use_id = answered_use(event.type, event.body)  # users send no agent.* events
        if use_id is None:
            kept.append(event)
            continue
        if use_id in seen:
            continue
        seen.add(use_id)
        earlier = logged_answer(use_id)
        if earlier is None:
            kept.append(event)
        elif event.type == EventType.USER_CUSTOM_TOOL_RESULT and earlier.type != event.type:
            # A 400, not a 409: the SDK's tool runner retries a 409 for minutes.
            raise Conflict(
                f"custom_tool_use_id: {use_id} already has a result: stead closed the call "
                "when its turn was interrupted",
                status=400,
            )
        else:
            repeated.append(earlier)
    return kept, repeated


def logged_answer(
    conn: Connection, session_id: str, use_id: str, keys: Mapping[str, str] = ANSWER_KEYS
) -> EventRecord | None:
    """The first event after the tool use ``use_id`` that answers it (or, with
    ``SETTLING_KEYS``, settles it)."""
    use = _events.find(conn, session_id, use_id)
    if use is None or use.seq is None:
        return None
    rows = conn.execute(
        select(events.c.id, events.c.type, events.c.body)
        .where(
            events.c.session_id == session_id,
            events.c.seq > use.seq,
            events.c.type.in_(list(keys)),
        )
        .order_by(events.c.seq)
    ).all()
    for row in rows:
        if answered_use(row.type, row.body, keys) == use_id:
            return _events.find(conn, session_id, row.id)
    return None
