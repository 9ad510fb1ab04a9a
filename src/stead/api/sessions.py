"""/v1/sessions: create, retrieve, update, list, archive, delete."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter, Depends, Query, Request

from stead.api import openapi, pagination, resources, wire
from stead.api.body import json_body
from stead.api.deps import Caller, caller, services
from stead.api.events import new_events
from stead.api.params import ResourceId, SessionId, Timestamp
from stead.api.wire import JSONResponse
from stead.events import EventType
from stead.ids import new_id
from stead.runtime import check_skill_refs, session_deleted
from stead.schemas import MAX_VERSION, agents, events, sessions
from stead.store import AgentRecord, NewEvent, SessionFilter, SessionRecord

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
SESSION = openapi.response("beta.BetaManagedAgentsSession")
SESSION_OR_CONFLICT = openapi.response("beta.BetaManagedAgentsSession", 409)
NEW_SESSION = openapi.response("beta.BetaManagedAgentsSession", 404, 409)
"""Its agent and environment are named in the body."""
Status = Literal["rescheduling", "running", "idle", "terminated"]


def _json(record: SessionRecord) -> dict[str, object]:
    return wire.session(record, datetime.now(UTC))


@router.post("", responses=NEW_SESSION, openapi_extra=openapi.body("SessionCreateParams"))
async def create_session(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    spec = sessions.parse_create(await json_body(request))
    events.check_initial_events(spec.initial_events)

    app = services(request)
    prices = app.runtime.prices
    files = await resources.check_file_mounts(
        app, who.workspace_id, spec.environment_id, spec.file_mounts, "resources."
    )
    memory = await resources.check_memory_mounts(
        app, who.workspace_id, spec.environment_id, spec.memory_mounts
    )
    clones, tokens = await resources.check_repositories(
        app, who.workspace_id, spec.environment_id, spec.repositories
    )
    made = {"file": iter(files), "memory_store": iter(memory), "github_repository": iter(clones)}
    spec.fields["resources"] = [next(made[kind]) for kind in spec.resource_types]
    spec.fields["repository_tokens"] = tokens
    if "skills" in spec.overrides:
        skills = agents.resolve_skills(list(spec.overrides["skills"] or []), "agent.skills")
        await check_skill_refs(app.store, who.workspace_id, skills, "agent.skills")

    def build_agent(agent: AgentRecord) -> dict[str, object]:
        built = sessions.snapshot(agent.id, agent.version, agent.definition, spec.overrides)
        agents.check_served(built["model"], app.settings.openai_models, "agent.model")
        model = built["model"]["id"]
        sessions.check_budgetable(spec.fields["budget"], model, prices.priced(model))
        return built

    record, logged = await app.store.create_session(
        who.workspace_id,
        (spec.agent_id, spec.agent_version),
        build_agent,
        spec.environment_id,
        spec.fields,
        new_events(spec.initial_events),
    )
    app.runtime.committed(record.id, logged, queued=record.status != "idle")
    return JSONResponse(_json(record))


@router.get("/{session_id}", responses=SESSION)
async def retrieve_session(
    request: Request, session_id: SessionId, who: Caller = Depends(caller)
) -> JSONResponse:
    return JSONResponse(
        _json(await services(request).store.get_session(who.workspace_id, session_id))
    )


@router.post(
    "/{session_id}",
    responses=SESSION_OR_CONFLICT,
    openapi_extra=openapi.body("SessionUpdateParams"),
)
async def update_session(
    request: Request, session_id: SessionId, who: Caller = Depends(caller)
) -> JSONResponse:
    params = sessions.parse_update(await json_body(request))

    def change(current: SessionRecord) -> dict[str, object]:
        columns = {
            "agent": current.agent,
            "budget": current.budget,
            "metadata": current.metadata,
            "usage": current.usage,
        }
        return sessions.apply_update(columns, params)

    app = services(request)
    record, event = await app.store.update_session(
        who.workspace_id,
        session_id,
        change,
        NewEvent(new_id("event"), EventType.SESSION_UPDATED, {}),
    )
    if event is not None:
        app.runtime.committed(session_id, [event])
    if record.status != "idle":  # a raised budget let a stopped turn go on
        app.runtime.wake(session_id)
    return JSONResponse(_json(record))


@router.post("/{session_id}/archive", responses=SESSION_OR_CONFLICT)
async def archive_session(
    request: Request, session_id: SessionId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    record, logged = await app.store.archive_session(who.workspace_id, session_id)
    app.bus.publish(session_id, logged)
    # Archived, it takes no more turns nor terminals: its sandbox goes as a
    # terminated session's does (its lease ends with the archive).
    await app.sandboxes.session_ended(session_id)
    if app.sweeper is not None:
        app.sweeper.poke()
    return JSONResponse(_json(record))


@router.delete(
    "/{session_id}", responses=openapi.response("beta.BetaManagedAgentsDeletedSession", 409)
)
async def delete_session(
    request: Request, session_id: SessionId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    await app.store.delete_session(who.workspace_id, session_id)
    app.bus.publish_final(session_id, session_deleted(session_id))
    await app.sandboxes.session_deleted(session_id)
    if app.sweeper is not None:
        app.sweeper.poke()  # the session's sandbox is erased now, not a round later
    return JSONResponse({"id": session_id, "type": "session_deleted"})


@router.get("")
async def list_sessions(
    request: Request,
    agent_id: ResourceId | None = Query(None),
    agent_version: int | None = Query(None, ge=1, le=MAX_VERSION),
    created_gt: Timestamp | None = Query(None, alias="created_at[gt]"),
    created_gte: Timestamp | None = Query(None, alias="created_at[gte]"),
    created_lt: Timestamp | None = Query(None, alias="created_at[lt]"),
    created_lte: Timestamp | None = Query(None, alias="created_at[lte]"),
    deployment_id: ResourceId | None = Query(None),
    include_archived: bool = Query(False),
    limit: int = Query(20, ge=1, le=100),
    memory_store_id: ResourceId | None = Query(None),
    order: Literal["asc", "desc"] = Query("desc"),
    page: str | None = Query(None),
    statuses: list[Status] | None = Query(None, alias="statuses[]"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    where = SessionFilter(
        agent_id=agent_id,
        # The SDK documents the version filter as applying only along with the agent's.
        agent_version=agent_version if agent_id is not None else None,
        created_gt=created_gt,
        created_gte=created_gte,
        created_lt=created_lt,
        created_lte=created_lte,
        include_archived=include_archived,
        statuses=tuple(statuses or ()),
        deployment_id=deployment_id,
        memory_store_id=memory_store_id,
    )
    listing = pagination.listing(request, who, "sessions")
    request_page = pagination.page_request(listing, order, limit, page, pagination.CREATED_KEY)
    result = await services(request).store.list_sessions(who.workspace_id, request_page, where)
    return JSONResponse(
        pagination.page_body(
            listing,
            order,
            result,
            lambda r: (r.created_at, r.id),
            _json,
            bidirectional=True,
        )
    )
