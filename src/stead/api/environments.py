"""/v1/environments: create, retrieve, update, list, archive, delete."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request

from stead.api import openapi, pagination, wire
from stead.api.body import json_body
from stead.api.deps import Caller, caller, services
from stead.api.params import EnvironmentId
from stead.api.wire import JSONResponse
from stead.schemas import environments
from stead.store import EnvironmentRecord

router = APIRouter(prefix="/v1/environments", tags=["environments"])
ENVIRONMENT = openapi.response("beta.BetaEnvironment")
ENVIRONMENT_OR_CONFLICT = openapi.response("beta.BetaEnvironment", 409)


def _columns(record: EnvironmentRecord) -> dict[str, object]:
    return {
        "name": record.name,
        "description": record.description,
        "config": record.config,
        "metadata": record.metadata,
        "scope": record.scope,
    }


@router.post(
    "", responses=ENVIRONMENT_OR_CONFLICT, openapi_extra=openapi.body("EnvironmentCreateParams")
)
async def create_environment(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    fields = environments.parse_create(await json_body(request))
    record = await services(request).store.create_environment(who.workspace_id, **fields)
    return JSONResponse(wire.environment(record))


@router.get("/{environment_id}", responses=ENVIRONMENT)
async def retrieve_environment(
    request: Request, environment_id: EnvironmentId, who: Caller = Depends(caller)
) -> JSONResponse:
    record = await services(request).store.get_environment(who.workspace_id, environment_id)
    return JSONResponse(wire.environment(record))


@router.post(
    "/{environment_id}",
    responses=ENVIRONMENT_OR_CONFLICT,
    openapi_extra=openapi.body("EnvironmentUpdateParams"),
)
async def update_environment(
    request: Request, environment_id: EnvironmentId, who: Caller = Depends(caller)
) -> JSONResponse:
    params = environments.parse_update(await json_body(request))
    record = await services(request).store.update_environment(
        who.workspace_id,
        environment_id,
        lambda current: environments.apply_update(_columns(current), params),
    )
    return JSONResponse(wire.environment(record))


@router.post("/{environment_id}/archive", responses=ENVIRONMENT)
async def archive_environment(
    request: Request, environment_id: EnvironmentId, who: Caller = Depends(caller)
) -> JSONResponse:
    record = await services(request).store.archive_environment(who.workspace_id, environment_id)
    return JSONResponse(wire.environment(record))


@router.delete(
    "/{environment_id}", responses=openapi.response("beta.BetaEnvironmentDeleteResponse", 409)
)
async def delete_environment(
    request: Request, environment_id: EnvironmentId, who: Caller = Depends(caller)
) -> JSONResponse:
    await services(request).store.delete_environment(who.workspace_id, environment_id)
    return JSONResponse({"id": environment_id, "type": "environment_deleted"})


@router.get("")
async def list_environments(
    request: Request,
    limit: int = Query(20, ge=1, le=100),
    page: str | None = Query(None),
    include_archived: bool = Query(False),
    who: Caller = Depends(caller),
) -> JSONResponse:
    store = services(request).store
    return JSONResponse(
        await pagination.newest_first(
            request,
            who,
            "environments",
            limit,
            page,
            lambda at: store.list_environments(who.workspace_id, at, include_archived),
            wire.environment,
        )
    )
