"""/v1/sessions/{id}/events: send, list, and the SSE stream."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from starlette.responses import Response

from stead import usage as accounting
from stead.api import openapi, pagination, wire
from stead.api.body import json_body
from stead.api.deps import Caller, caller, refusal, services
from stead.api.params import ResourceId, SessionId, Timestamp
from stead.api.sse import EventStream
from stead.api.wire import JSONResponse
from stead.events import EventType
from stead.ids import new_id, primary_thread_id
from stead.jsonvalues import Json
from stead.schemas import RequestError, SessionEventType, events
from stead.store import (
    EventFilter,
    EventRecord,
    NewEvent,
    SessionRecord,
    Store,
    event_cursor_keys,
)

router = APIRouter(prefix="/v1/sessions/{session_id}", tags=["session events"])


def new_events(params: Sequence[Json]) -> list[NewEvent]:
    """Gives each validated client event its id; the body keeps every other field."""
    created = []
    for event in params:
        body = {k: v for k, v in event.items() if k != "type"}
        created.append(NewEvent(id=new_id("event"), type=event["type"], body=body))
    return created


SETTLE_TYPES = frozenset(
    {
        EventType.USER_TOOL_CONFIRMATION,
        EventType.USER_TOOL_RESULT,
        EventType.USER_CUSTOM_TOOL_RESULT,
    }
)
"""What a session at its budget accepts (spec §5.3 step 7); interrupts are
accepted too (the store leaves them out of the log once the turn stopped at the
cap, and logs them while the turn that crossed it still runs)."""


def _check_threads(session: SessionRecord, params: list[Json]) -> None:
    """An event may name the thread it is for: the session's only one, its primary."""
    primary = primary_thread_id(session.id)
    for i, event in enumerate(params):
        named = event.get("session_thread_id")
        if named is not None and named != primary:
            raise RequestError(
                f"events.{i}.session_thread_id: no thread {str(named)[:80]!r} in this session "
                f"(its only thread is its primary, {primary})"
            )


def _check_budget(session: SessionRecord, params: list[Json]) -> None:
    """Refuses what a session paused at its budget does not take (spec §3.1).
    A turn still running at the cap (its last model request crossed it, its
    tools still run) is not paused yet: a message is queued as during any turn,
    and stays queued if the turn then stops at the cap."""
    if session.status != "idle" or not accounting.at_cap(session.budget, session.usage):
        return
    for i, event in enumerate(params):
        if event["type"] not in SETTLE_TYPES and event["type"] != EventType.USER_INTERRUPT:
            raise RequestError(
                f"events.{i}: the session reached its budget; it accepts only tool results "
                "and confirmations until the budget is raised or removed (sessions.update)",
                code="budget_reached",
            )


async def _check_worker_results(
    store: Store, who: Caller, session_id: str, params: Sequence[Json]
) -> None:
    """A ``user.tool_result`` answers a call a self-hosted environment's worker
    runs; elsewhere stead runs the call and answers it, and a second answer would
    be in every later model request (which the Messages API refuses). Read only
    for such a request (an environment's type never changes)."""
    given = [i for i, e in enumerate(params) if e["type"] == EventType.USER_TOOL_RESULT]
    if not given:
        return
    session = await store.get_session(who.workspace_id, session_id)
    environment = await store.get_environment(who.workspace_id, session.environment_id)
    if environment.config.get("type") != "self_hosted":
        raise RequestError(
            f"events.{given[0]}: user.tool_result answers a tool call of a self_hosted "
            "environment's worker; this session's tools run in stead (a custom tool's "
            "result is a user.custom_tool_result)"
        )


def _reference_check(
    params: list[Json],
) -> Callable[[SessionRecord, Callable[[str], EventRecord | None]], None]:
    def validate(session: SessionRecord, lookup: Callable[[str], EventRecord | None]) -> None:
        _check_budget(session, params)
        _check_threads(session, params)

        def found(event_id: str) -> tuple[str, Json] | None:
            record = lookup(event_id)
            return None if record is None else (record.type, record.body)

        events.check_references(params, found)

    return validate


@router.post(
    "/events",
    responses=openapi.response("beta.sessions.BetaManagedAgentsSendSessionEvents", 409),
    openapi_extra=openapi.body("EventSendParams"),
)
async def send_events(
    request: Request, session_id: SessionId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    params = events.parse_send(await json_body(request), app.settings.max_events_per_request)
    await _check_worker_results(app.store, who, session_id, params)
    accepted = await app.store.accept_user_events(
        who.workspace_id,
        session_id,
        new_events(params),
        _reference_check(params),
        app.runtime.claim_terms(session_id),
    )
    app.runtime.accepted(session_id, accepted)
    return JSONResponse({"data": [wire.event(e) for e in accepted.echoes]})


@router.get("/events")
async def list_events(
    request: Request,
    session_id: SessionId,
    limit: int = Query(1000, ge=1, le=1000),
    order: Literal["asc", "desc"] = Query("asc"),
    page: str | None = Query(None),
    types: list[SessionEventType] | None = Query(None, alias="types[]"),
    created_gt: Timestamp | None = Query(None, alias="created_at[gt]"),
    created_gte: Timestamp | None = Query(None, alias="created_at[gte]"),
    created_lt: Timestamp | None = Query(None, alias="created_at[lt]"),
    created_lte: Timestamp | None = Query(None, alias="created_at[lte]"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    where = EventFilter(
        types=tuple(types or ()),
        processed_gt=created_gt,
        processed_gte=created_gte,
        processed_lt=created_lt,
        processed_lte=created_lte,
    )
    return await events_page(request, who, session_id, limit, order, page, where)


async def events_page(
    request: Request,
    who: Caller,
    session_id: str,
    limit: int,
    order: Literal["asc", "desc"],
    page: str | None,
    where: EventFilter,
) -> JSONResponse:
    """A page of the session's events (also its primary thread's: ``threads.py``)."""
    listing = pagination.listing(request, who, f"events:{session_id}")
    request_page = pagination.page_request(
        listing, order, limit, page, pagination.EVENT_KEY, or_types=pagination.PENDING_EVENT_KEY
    )
    after = request_page.after
    # A third part: the queue or log position an ascending cursor passed, or the
    # log's ceiling a descending one in the queue carries (``event_cursor_keys``).
    if after is not None and (
        after[0] not in (0, 1) or (len(after) == 3 and order != "asc" and after[0] != 1)
    ):
        raise RequestError(pagination.NOT_OURS)
    store = services(request).store
    log_top = None
    if order == "desc" and after is None and not where.has_time_bounds:
        # Read before the page: the log as the walk found it (``event_cursor_keys``).
        log_top = await store.last_seq(session_id)
    result = await store.list_events(who.workspace_id, session_id, request_page, where)
    key = event_cursor_keys(request_page, result.items, log_top)
    return JSONResponse(pagination.page_body(listing, order, result, key, wire.event))


@router.get("/events/stream", response_class=Response)
async def stream_events(
    request: Request,
    session_id: SessionId,
    event_deltas: list[str] | None = Query(None, alias="event_deltas[]"),
    after: ResourceId | None = Query(
        None, description="Replay every event after this event id first."
    ),
    last_event_id: str | None = Header(None, alias="Last-Event-ID"),
    who: Caller = Depends(caller),
) -> Any:
    return await event_stream(request, who, session_id, event_deltas, after, last_event_id)


async def event_stream(
    request: Request,
    who: Caller,
    session_id: str,
    event_deltas: list[str] | None,
    after: str | None,
    last_event_id: str | None,
) -> EventStream:
    """The session's SSE stream (also its primary thread's: ``threads.py``)."""
    previews = frozenset(events.parse_delta_types(event_deltas or []))
    app = services(request)
    await app.store.get_session(who.workspace_id, session_id)
    resume_from = after or last_event_id
    after_seq: int | None = None
    if resume_from:
        after_seq = await app.store.find_event_seq(session_id, resume_from)
        if after_seq is None:
            field = "after" if after else "Last-Event-ID"
            raise RequestError(
                f"{field}: no event {resume_from[:80]!r} in this session's log (an event "
                "still queued, processed_at null, is in the log once its turn takes it)"
            )

    async def authorised() -> bool:
        return await refusal(request) is None

    return EventStream(
        app.store,
        app.bus,
        session_id,
        after_seq,
        app.settings.sse_heartbeat_seconds,
        previews,
        authorised,
        app.stopping,
    )
