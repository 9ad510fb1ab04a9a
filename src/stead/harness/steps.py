"""The stateless heart of the agent loop: from the session log, what happens next.

``next_step(events)`` reads only the log (DESIGN rule 3), so a brain that
crashed and restarted computes the same step again. Events are wire-form dicts
(``type``, ``id`` and the body fields, plus the private ``_internal`` dict).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stead.events import EventType
from stead.jsonvalues import Json

TOOL_USE_TYPES = (
    EventType.AGENT_TOOL_USE,
    EventType.AGENT_MCP_TOOL_USE,
    EventType.AGENT_CUSTOM_TOOL_USE,
)
RESULT_KEYS = {
    EventType.AGENT_TOOL_RESULT: "tool_use_id",
    EventType.AGENT_MCP_TOOL_RESULT: "mcp_tool_use_id",
    EventType.USER_TOOL_RESULT: "tool_use_id",
    EventType.USER_CUSTOM_TOOL_RESULT: "custom_tool_use_id",
}


@dataclass(frozen=True)
class CallModel:
    """Ask the model; ``position`` is the seq of the last event it will see."""

    position: int


@dataclass(frozen=True)
class RunTools:
    """Built-in and MCP tool uses to execute now, and ones to answer with an error instead."""

    run: list[Json]
    refuse: list[tuple[Json, str]]


@dataclass(frozen=True)
class AwaitInput:
    """Blocked on custom tool results or confirmations for these event ids."""

    event_ids: list[str]


@dataclass(frozen=True)
class EndTurn:
    pass


Step = CallModel | RunTools | AwaitInput | EndTurn


def _last_response(events: Sequence[Json]) -> tuple[int, int] | None:
    """(start index, end index) of the last model request that produced an answer."""
    for end in range(len(events) - 1, -1, -1):
        event = events[end]
        if event["type"] == EventType.SPAN_MODEL_REQUEST_END and not event.get("is_error"):
            start_id = event.get("model_request_start_id")
            for start in range(end - 1, -1, -1):
                if events[start]["id"] == start_id:
                    return start, end
            return end, end
    return None


def unresolved_tool_uses(events: Sequence[Json]) -> list[Json]:
    """Tool uses of the last model answer that have no result yet."""
    span = _last_response(events)
    if span is None:
        return []
    start, end = span
    answered = {
        event.get(RESULT_KEYS[event["type"]])
        for event in events[end + 1 :]
        if event["type"] in RESULT_KEYS
    }
    return [e for e in events[start:end] if e["type"] in TOOL_USE_TYPES and e["id"] not in answered]


def _confirmation(events: Sequence[Json], tool_use_id: str) -> Json | None:
    found = None
    for event in events:
        if (
            event["type"] == EventType.USER_TOOL_CONFIRMATION
            and event.get("tool_use_id") == tool_use_id
        ):
            found = event
    return found


def next_step(events: Sequence[Json]) -> Step:
    position = int(events[-1].get("_seq", len(events))) if events else 0
    span = _last_response(events)
    if span is None:
        has_input = any(e["type"] == EventType.USER_MESSAGE for e in events)
        return CallModel(position) if has_input else EndTurn()
    start, end = span
    open_uses = unresolved_tool_uses(events)
    if open_uses:
        run: list[Json] = []
        refuse: list[tuple[Json, str]] = []
        waiting: list[str] = []
        for use in open_uses:
            if use["type"] == EventType.AGENT_CUSTOM_TOOL_USE:
                waiting.append(use["id"])
                continue
            permission = use.get("evaluated_permission", "allow")
            if permission == "deny":
                refuse.append((use, use.get("_internal", {}).get("refusal", "denied by policy")))
            elif permission == "allow":
                run.append(use)
            else:
                answer = _confirmation(events[end + 1 :], use["id"])
                if answer is None:
                    waiting.append(use["id"])
                elif answer.get("result") == "allow":
                    run.append(use)
                else:
                    reason = answer.get("deny_message") or "the user denied this tool call"
                    refuse.append((use, reason))
        if run or refuse:
            return RunTools(run, refuse)
        return AwaitInput(waiting)
    answered_tools = any(e["type"] in TOOL_USE_TYPES for e in events[start:end])
    new_input = any(e["type"] == EventType.USER_MESSAGE for e in events[end + 1 :])
    if answered_tools or new_input:
        return CallModel(position)
    return EndTurn()
