"""/v1/agents: create, retrieve (optionally a version), update, list, archive, versions."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request

from stead.api import openapi, pagination, wire
from stead.api.body import json_body
from stead.api.deps import Caller, caller, services
from stead.api.params import AgentId, Timestamp
from stead.api.wire import JSONResponse
from stead.jsonvalues import Json
from stead.runtime import check_skill_refs
from stead.schemas import MAX_VERSION, agents

router = APIRouter(prefix="/v1/agents", tags=["agents"])
AGENT = openapi.response("beta.BetaManagedAgentsAgent")
AGENT_OR_CONFLICT = openapi.response("beta.BetaManagedAgentsAgent", 409)


@router.post("", responses=AGENT, openapi_extra=openapi.body("AgentCreateParams"))
async def create_agent(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    definition = agents.definition_from_create(await json_body(request))
    app = services(request)
    agents.check_served(definition["model"], app.settings.openai_models)
    store = app.store
    await check_skill_refs(store, who.workspace_id, definition["skills"], "skills")
    record = await store.create_agent(who.workspace_id, definition)
    return JSONResponse(wire.agent(record))


@router.get("/{agent_id}", responses=AGENT)
async def retrieve_agent(
    request: Request,
    agent_id: AgentId,
    version: int | None = Query(None, ge=1, le=MAX_VERSION),
    who: Caller = Depends(caller),
) -> JSONResponse:
    record = await services(request).store.get_agent(who.workspace_id, agent_id, version)
    return JSONResponse(wire.agent(record))


@router.post(
    "/{agent_id}", responses=AGENT_OR_CONFLICT, openapi_extra=openapi.body("AgentUpdateParams")
)
async def update_agent(
    request: Request, agent_id: AgentId, who: Caller = Depends(caller)
) -> JSONResponse:
    expected, params = agents.parse_update(await json_body(request))
    store = services(request).store
    if "skills" in params:
        skills = agents.resolve_skills(list(params["skills"] or []))
        await check_skill_refs(store, who.workspace_id, skills, "skills")
    served = services(request).settings.openai_models

    def updated(current: Json) -> Json:
        new = agents.apply_update(current, params)
        agents.check_served(new["model"], served)
        return new

    record = await store.update_agent(who.workspace_id, agent_id, expected, updated)
    return JSONResponse(wire.agent(record))


@router.post("/{agent_id}/archive", responses=AGENT)
async def archive_agent(
    request: Request, agent_id: AgentId, who: Caller = Depends(caller)
) -> JSONResponse:
    record = await services(request).store.archive_agent(who.workspace_id, agent_id)
    return JSONResponse(wire.agent(record))


@router.get("")
async def list_agents(
    request: Request,
    limit: int = Query(20, ge=1, le=100),
    page: str | None = Query(None),
    include_archived: bool = Query(False),
    created_gte: Timestamp | None = Query(None, alias="created_at[gte]"),
    created_lte: Timestamp | None = Query(None, alias="created_at[lte]"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    store = services(request).store
    return JSONResponse(
        await pagination.newest_first(
            request,
            who,
            "agents",
            limit,
            page,
            lambda at: store.list_agents(
                who.workspace_id, at, include_archived, created_gte, created_lte
            ),
            wire.agent,
        )
    )


@router.get("/{agent_id}/versions")
async def list_agent_versions(
    request: Request,
    agent_id: AgentId,
    limit: int = Query(20, ge=1, le=100),
    page: str | None = Query(None),
    who: Caller = Depends(caller),
) -> JSONResponse:
    listing = pagination.listing(request, who, f"agent_versions:{agent_id}")
    request_page = pagination.page_request(listing, "desc", limit, page, pagination.VERSION_KEY)
    result = await services(request).store.list_agent_versions(
        who.workspace_id, agent_id, request_page
    )
    return JSONResponse(
        pagination.page_body(listing, "desc", result, lambda r: (r.version,), wire.agent)
    )
