"""/v1/sessions/{id}/threads: a session's threads (``client.beta.sessions.threads``).

Every session has a primary thread; a multiagent session also has a thread per
agent it called. stead runs single-agent sessions only (``multiagent`` is
refused at ``agents.create``), so each session has exactly its primary thread:
the session's own agent, status and usage, whose events and stream are the
session's. Its id is the session's with the ``sthr_`` prefix, so it needs no
storage and is the same on every process. The primary thread is archived
with its session, never by itself.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from starlette.responses import Response

from stead.api import openapi, pagination, wire
from stead.api.deps import Caller, caller, services
from stead.api.events import event_stream, events_page
from stead.api.params import ResourceId, SessionId
from stead.api.sessions import Status
from stead.api.wire import JSONResponse
from stead.ids import primary_thread_id
from stead.jsonvalues import Json
from stead.schemas import RequestError
from stead.store import EventFilter, NotFound, SessionRecord

router = APIRouter(prefix="/v1/sessions/{session_id}/threads", tags=["session threads"])
THREAD = openapi.response("beta.sessions.BetaManagedAgentsSessionThread")


def _thread(record: SessionRecord) -> Json:
    shown = wire.session(record, datetime.now(UTC))
    return {
        "type": "session_thread",
        "id": primary_thread_id(record.id),
        "session_id": record.id,
        "parent_thread_id": None,
        # The thread's own agent: the roster of a multiagent one stays on the session.
        "agent": {k: v for k, v in shown["agent"].items() if k != "multiagent"},
        "status": shown["status"],
        "stats": shown["stats"],
        "usage": shown["usage"],
        "workflow_run_id": None,
        "created_at": shown["created_at"],
        "updated_at": shown["updated_at"],
        "archived_at": shown["archived_at"],  # with its session
    }


async def _session_of_thread(
    request: Request, who: Caller, session_id: str, thread_id: str
) -> SessionRecord:
    record = await services(request).store.get_session(who.workspace_id, session_id)
    if thread_id != primary_thread_id(session_id):
        raise NotFound("session thread", thread_id)
    return record


@router.get("")
async def list_threads(
    request: Request,
    session_id: SessionId,
    limit: int = Query(1000, ge=1, le=1000),
    page: str | None = Query(None),
    statuses: list[Status] | None = Query(None, alias="statuses[]"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    record = await services(request).store.get_session(who.workspace_id, session_id)
    if page:  # one thread fits any page: no listing hands out a cursor
        raise RequestError(pagination.NOT_OURS)
    threads = [_thread(record)]
    if statuses:
        threads = [t for t in threads if t["status"] in statuses]
    return JSONResponse({"data": threads, "next_page": None})


@router.get("/{thread_id}", responses=THREAD)
async def retrieve_thread(
    request: Request, session_id: SessionId, thread_id: ResourceId, who: Caller = Depends(caller)
) -> JSONResponse:
    return JSONResponse(_thread(await _session_of_thread(request, who, session_id, thread_id)))


@router.post("/{thread_id}/archive", responses=THREAD)
async def archive_thread(
    request: Request, session_id: SessionId, thread_id: ResourceId, who: Caller = Depends(caller)
) -> JSONResponse:
    await _session_of_thread(request, who, session_id, thread_id)
    raise RequestError(
        f"thread_id: {thread_id} is the session's primary thread, which cannot be archived "
        "(archive the session itself: sessions.archive)"
    )


@router.get("/{thread_id}/events")
async def list_thread_events(
    request: Request,
    session_id: SessionId,
    thread_id: ResourceId,
    limit: int = Query(1000, ge=1, le=1000),
    page: str | None = Query(None),
    who: Caller = Depends(caller),
) -> JSONResponse:
    await _session_of_thread(request, who, session_id, thread_id)
    return await events_page(request, who, session_id, limit, "asc", page, EventFilter())


@router.get("/{thread_id}/stream", response_class=Response)
async def stream_thread_events(
    request: Request,
    session_id: SessionId,
    thread_id: ResourceId,
    event_deltas: list[str] | None = Query(None, alias="event_deltas[]"),
    last_event_id: str | None = Header(None, alias="Last-Event-ID"),
    who: Caller = Depends(caller),
) -> Any:
    await _session_of_thread(request, who, session_id, thread_id)
    return await event_stream(request, who, session_id, event_deltas, None, last_event_id)
