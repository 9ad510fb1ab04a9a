"""stead's limits routes: a workspace's own limits and this month's use (any key),
and setting limits (admin keys only: ``stead keys create --admin``).

GET  /v1/stead/limits                                  the caller's workspace
GET  /v1/stead/workspaces/{ws}/limits                  admin
POST /v1/stead/workspaces/{ws}/limits                  admin: set or clear
GET  /v1/stead/workspaces/{ws}/environments/{env}/limits   admin
POST /v1/stead/workspaces/{ws}/environments/{env}/limits   admin: set or clear
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request

from stead import usage as accounting
from stead.api import openapi, wire
from stead.api.body import json_body
from stead.api.deps import Caller, admin_caller, caller, services
from stead.api.params import ID_PATTERN, EnvironmentId
from stead.api.wire import JSONResponse
from stead.jsonvalues import Json
from stead.schemas import workspace_limits as schema
from stead.store import WORKSPACE, LimitStore, MonthUse

router = APIRouter(prefix="/v1/stead", tags=["limits"])
WorkspaceId = Annotated[str, Path(pattern=ID_PATTERN)]


def _month(use: MonthUse) -> Json:
    return {
        "since": wire.ts(use.since),
        "tokens": use.tokens,
        "list_cost": {
            "amount": str(accounting.cents(use.list_cost_nanos)),
            "currency": "USD",
        },
        "sandbox_seconds": use.sandbox_seconds,
        "sandboxes": use.sandboxes,
    }


async def _workspace_limits(store: LimitStore, workspace_id: str) -> JSONResponse:
    limits = await store.limits(workspace_id)  # first: NotFound for an unknown workspace
    use = await store.month_use(workspace_id)
    return JSONResponse(
        {
            "type": "workspace_limits",
            "workspace_id": workspace_id,
            "limits": schema.wire(limits, schema.WORKSPACE_FIELDS),
            "this_month": _month(use),
        }
    )


@router.get("/limits", responses=openapi.errors(401))
async def own_limits(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    return await _workspace_limits(services(request).store, who.workspace_id)


@router.get("/workspaces/{workspace_id}/limits", responses=openapi.errors(403, 404))
async def workspace_limits(
    request: Request, workspace_id: WorkspaceId, who: Caller = Depends(admin_caller)
) -> JSONResponse:
    return await _workspace_limits(services(request).store, workspace_id)


@router.post("/workspaces/{workspace_id}/limits", responses=openapi.errors(400, 403, 404))
async def set_workspace_limits(
    request: Request, workspace_id: WorkspaceId, who: Caller = Depends(admin_caller)
) -> JSONResponse:
    found = schema.changes(await json_body(request), schema.WORKSPACE_FIELDS)
    store = services(request).store
    await store.set_limits(workspace_id, WORKSPACE, found)
    return await _workspace_limits(store, workspace_id)


def _environment_limits(workspace_id: str, environment_id: str, limits: Json) -> JSONResponse:
    return JSONResponse(
        {
            "type": "environment_limits",
            "workspace_id": workspace_id,
            "environment_id": environment_id,
            "limits": schema.wire(limits, schema.ENVIRONMENT_FIELDS),
        }
    )


@router.get(
    "/workspaces/{workspace_id}/environments/{environment_id}/limits",
    responses=openapi.errors(403, 404),
)
async def environment_limits(
    request: Request,
    workspace_id: WorkspaceId,
    environment_id: EnvironmentId,
    who: Caller = Depends(admin_caller),
) -> JSONResponse:
    limits = await services(request).store.limits(workspace_id, environment_id)
    return _environment_limits(workspace_id, environment_id, limits)


@router.post(
    "/workspaces/{workspace_id}/environments/{environment_id}/limits",
    responses=openapi.errors(400, 403, 404),
)
async def set_environment_limits(
    request: Request,
    workspace_id: WorkspaceId,
    environment_id: EnvironmentId,
    who: Caller = Depends(admin_caller),
) -> JSONResponse:
    found = schema.changes(await json_body(request), schema.ENVIRONMENT_FIELDS)
    limits = await services(request).store.set_limits(workspace_id, environment_id, found)
    return _environment_limits(workspace_id, environment_id, limits)
