"""Builders of the session events the agent loop writes (spec §3.3-3.5)."""

from __future__ import annotations

from datetime import UTC, datetime

from stead import usage as accounting
from stead.events import EventType
from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store import EventRecord, NewEvent

USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


def new(kind: str, body: Json | None = None) -> NewEvent:
    return NewEvent(new_id("event"), kind, body or {})


def status_idle(stop_reason: Json, stop_details: Json | None = None) -> NewEvent:
    body = {"stop_reason": stop_reason}
    if stop_details is not None:
        body["stop_details"] = stop_details
    return new(EventType.SESSION_STATUS_IDLE, body)


REFUSAL_CATEGORIES = frozenset(
    {"cyber", "bio", "frontier_llm", "reasoning_extraction", "general_harms"}
)
"""The refusal categories the SDK's session types name; a newer one is reported
as none (its explanation still says why), so no SDK client fails to read it."""


def refusal_details(upstream: Json | None) -> Json:
    """A refused answer's ``stop_details`` as a session reports them: the
    category and explanation the upstream gave, if any (nothing of its retry
    tokens, which are the request's, not the session's)."""
    given = upstream or {}
    category, explanation = given.get("category"), given.get("explanation")
    return {
        "type": "refusal",
        "category": category if category in REFUSAL_CATEGORIES else None,
        "explanation": explanation if isinstance(explanation, str) else None,
    }


def session_error(error_type: str, message: str, retry_status: str, **fields: str) -> NewEvent:
    """``fields``: the error type's own (``mcp_server_name``, ``vault_id`` ...)."""
    error = {"type": error_type, "message": message, "retry_status": {"type": retry_status}}
    return new(EventType.SESSION_ERROR, {"error": {**error, **fields}})


def model_usage(usage: dict[str, int]) -> dict[str, int]:
    return {key: int(usage.get(key, 0)) for key in USAGE_KEYS}


def span_end(
    start_id: str,
    usage: dict[str, int],
    *,
    is_error: bool = False,
    too_long: int | None = None,
    too_large: int | None = None,
) -> NewEvent:
    """``too_long``: the model refused the request as longer than its window,
    counting these tokens in it (0: it did not say); ``too_large``: its API
    refused the request, of these bytes, as larger than it takes. The next
    step compacts (``harness.compaction``)."""
    body: Json = {"model_request_start_id": start_id, "model_usage": model_usage(usage)}
    if is_error or too_long is not None or too_large is not None:
        body["is_error"] = True
    if too_long is not None:
        body["_internal"] = {"too_long": too_long}
    if too_large is not None:
        body["_internal"] = {"too_large": too_large}
    return new(EventType.SPAN_MODEL_REQUEST_END, body)


def tool_result(tool_use: Json, content: list[Json], is_error: bool) -> NewEvent:
    """The result of a built-in or MCP tool use, of the type that answers it."""
    if tool_use["type"] == EventType.AGENT_MCP_TOOL_USE:
        body: Json = {"mcp_tool_use_id": tool_use["id"], "content": content, "is_error": is_error}
        return new(EventType.AGENT_MCP_TOOL_RESULT, body)
    body = {"tool_use_id": tool_use["id"], "content": content, "is_error": is_error}
    return new(EventType.AGENT_TOOL_RESULT, body)


def text(message: str) -> list[Json]:
    return [{"type": "text", "text": message}]


def as_log(record: EventRecord) -> Json:
    """A logged event as the harness reads it: wire fields plus private ones."""
    return {"type": record.type, "id": record.id, **record.body, "_seq": record.seq}


def session_usage(usage: Json, budget: Json | None) -> NewEvent:
    """The session's cumulative usage (``stead.usage`` counters) as the spec shows it."""
    return new(EventType.SESSION_USAGE, {"usage": accounting.wire(usage), "budget": budget})


def session_deleted(session_id: str) -> EventRecord:
    """The last frame a deleted session's streams send (never logged: the log is gone)."""
    return EventRecord(
        session_id=session_id,
        id=new_id("event"),
        type=EventType.SESSION_DELETED,
        body={},
        processed_at=datetime.now(UTC),
    )
