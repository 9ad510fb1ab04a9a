"""/v1/memory_stores/{id}/memory_versions: list, retrieve, redact.

Versions are immutable records of every write of a memory, newest first; they
outlive their memory. Redaction clears a version's content, path, hash and size
(its blob is removed) and keeps who wrote it and when.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request

from stead.api import openapi, pagination, wire
from stead.api.deps import Caller, caller, services
from stead.api.memories import FULL_PAGE, View, api_actor
from stead.api.params import MemoryStoreId, MemoryVersionId, ResourceId, Timestamp
from stead.api.wire import JSONResponse
from stead.jsonvalues import Json
from stead.runtime import MemoryKeeper
from stead.store import Actor, MemoryVersionRecord, VersionFilter

router = APIRouter(
    prefix="/v1/memory_stores/{memory_store_id}/memory_versions", tags=["memory_stores"]
)
VERSION = openapi.response("beta.memory_stores.BetaManagedAgentsMemoryVersion")


async def shown(keeper: MemoryKeeper, record: MemoryVersionRecord, view: View) -> Json:
    return wire.memory_version(record, await keeper.content(record) if view == "full" else None)


@router.get("")
async def list_memory_versions(
    request: Request,
    memory_store_id: MemoryStoreId,
    limit: int = Query(20, ge=1, le=100),
    page: str | None = Query(None),
    memory_id: ResourceId | None = Query(None),
    operation: Literal["created", "modified", "deleted"] | None = Query(None),
    api_key_id: ResourceId | None = Query(None),
    session_id: ResourceId | None = Query(None),
    service_account_id: ResourceId | None = Query(None),
    created_gte: Timestamp | None = Query(None, alias="created_at[gte]"),
    created_lte: Timestamp | None = Query(None, alias="created_at[lte]"),
    view: View = Query("basic"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    if view == "full":
        limit = min(limit, FULL_PAGE)
    named = {
        "api_actor": api_key_id,
        "session_actor": session_id,
        "service_account_actor": service_account_id,
    }
    actors = tuple(Actor(kind, ident) for kind, ident in named.items() if ident is not None)
    where = VersionFilter(memory_id, operation, actors, created_gte, created_lte)
    app = services(request)
    # The cursor is bound to the store and the filter it was issued for.
    name = f"memory_versions:{memory_store_id}:{where!r}"
    bound = pagination.listing(request, who, name)
    at = pagination.page_request(bound, "desc", limit, page, pagination.CREATED_KEY)
    result = await app.store.list_memory_versions(who.workspace_id, memory_store_id, where, at)
    data = [await shown(app.memories, record, view) for record in result.items]
    body = pagination.page_body(bound, "desc", result, lambda r: (r.created_at, r.id), lambda r: r)
    return JSONResponse({**body, "data": data})


@router.get("/{memory_version_id}", responses=VERSION)
async def retrieve_memory_version(
    request: Request,
    memory_store_id: MemoryStoreId,
    memory_version_id: MemoryVersionId,
    view: View = Query("full"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    app = services(request)
    record = await app.store.get_memory_version(
        who.workspace_id, memory_store_id, memory_version_id
    )
    return JSONResponse(await shown(app.memories, record, view))


@router.post(
    "/{memory_version_id}/redact",
    responses=openapi.response("beta.memory_stores.BetaManagedAgentsMemoryVersion", 409),
)
async def redact_memory_version(
    request: Request,
    memory_store_id: MemoryStoreId,
    memory_version_id: MemoryVersionId,
    who: Caller = Depends(caller),
) -> JSONResponse:
    record = await services(request).memories.redact(
        who.workspace_id, memory_store_id, memory_version_id, api_actor(who)
    )
    return JSONResponse(wire.memory_version(record, None))
