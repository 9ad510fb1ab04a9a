"""/v1/memory_stores: create, retrieve, update, list, archive, delete.

A store's memories and versions are in ``api/memories.py`` and
``api/memory_versions.py``. Another workspace's store answers 404, like an
unknown one.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request

from stead.api import openapi, pagination, wire
from stead.api.body import json_body
from stead.api.deps import Caller, caller, services
from stead.api.params import MemoryStoreId, Timestamp
from stead.api.wire import JSONResponse
from stead.schemas import memories
from stead.store import MemoryStoreRecord, StoreFilter

router = APIRouter(prefix="/v1/memory_stores", tags=["memory_stores"])
STORE = openapi.response("beta.BetaManagedAgentsMemoryStore")


@router.post("", responses=STORE, openapi_extra=openapi.body("MemoryStoreCreateParams"))
async def create_memory_store(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    fields = memories.parse_store_create(await json_body(request))
    record = await services(request).store.create_memory_store(who.workspace_id, **fields)
    return JSONResponse(wire.memory_store(record))


@router.get("/{memory_store_id}", responses=STORE)
async def retrieve_memory_store(
    request: Request, memory_store_id: MemoryStoreId, who: Caller = Depends(caller)
) -> JSONResponse:
    record = await services(request).store.get_memory_store(who.workspace_id, memory_store_id)
    return JSONResponse(wire.memory_store(record))


@router.post(
    "/{memory_store_id}", responses=STORE, openapi_extra=openapi.body("MemoryStoreUpdateParams")
)
async def update_memory_store(
    request: Request, memory_store_id: MemoryStoreId, who: Caller = Depends(caller)
) -> JSONResponse:
    params = memories.parse_store_update(await json_body(request))

    def change(current: MemoryStoreRecord) -> dict[str, object]:
        return memories.apply_store_update(current.metadata, params)

    record = await services(request).store.update_memory_store(
        who.workspace_id, memory_store_id, change
    )
    return JSONResponse(wire.memory_store(record))


@router.post("/{memory_store_id}/archive", responses=STORE)
async def archive_memory_store(
    request: Request, memory_store_id: MemoryStoreId, who: Caller = Depends(caller)
) -> JSONResponse:
    record = await services(request).store.archive_memory_store(who.workspace_id, memory_store_id)
    return JSONResponse(wire.memory_store(record))


@router.delete(
    "/{memory_store_id}", responses=openapi.response("beta.BetaManagedAgentsDeletedMemoryStore")
)
async def delete_memory_store(
    request: Request, memory_store_id: MemoryStoreId, who: Caller = Depends(caller)
) -> JSONResponse:
    await services(request).store.delete_memory_store(who.workspace_id, memory_store_id)
    return JSONResponse({"id": memory_store_id, "type": "memory_store_deleted"})


@router.get("")
async def list_memory_stores(
    request: Request,
    limit: int = Query(20, ge=1, le=100),
    page: str | None = Query(None),
    include_archived: bool = Query(False),
    created_gte: Timestamp | None = Query(None, alias="created_at[gte]"),
    created_lte: Timestamp | None = Query(None, alias="created_at[lte]"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    store = services(request).store
    where = StoreFilter(include_archived, created_gte, created_lte)
    return JSONResponse(
        await pagination.newest_first(
            request,
            who,
            "memory_stores",
            limit,
            page,
            lambda at: store.list_memory_stores(who.workspace_id, at, where),
            wire.memory_store,
        )
    )
