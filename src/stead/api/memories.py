"""/v1/memory_stores/{id}/memories: create, retrieve, update, list, delete.

Writes go through ``runtime.MemoryKeeper`` (content to the blob store, a new
version per write, the content-hash rule); reads come from the store and the
blob store, never from a sandbox. ``view`` is ``full`` by default on retrieve
and ``basic`` (no content) on list, create and update.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request

from stead.api import openapi, pagination, wire
from stead.api.body import json_body
from stead.api.deps import Caller, caller, services
from stead.api.params import MemoryId, MemoryStoreId
from stead.api.wire import JSONResponse
from stead.jsonvalues import Json
from stead.runtime import MemoryKeeper
from stead.schemas import RequestError, memories
from stead.store import Actor, MemoryPrefix, MemoryRecord

router = APIRouter(prefix="/v1/memory_stores/{memory_store_id}/memories", tags=["memory_stores"])
MEMORY = openapi.response("beta.memory_stores.BetaManagedAgentsMemory")
MEMORY_OR_CONFLICT = openapi.response("beta.memory_stores.BetaManagedAgentsMemory", 409)
View = Literal["basic", "full"]
FULL_PAGE = 20
"""With ``view=full`` a page holds at most this many items."""
CURSOR_KEY: tuple[type, ...] = (str,)
"""A memory listing's cursor: the path of the last item shown."""


def api_actor(who: Caller) -> Actor:
    return Actor("api_actor", who.key_id)


async def shown(keeper: MemoryKeeper, record: MemoryRecord, view: View) -> Json:
    return wire.memory(record, await keeper.content(record) if view == "full" else None)


@router.post("", responses=MEMORY_OR_CONFLICT, openapi_extra=openapi.body("MemoryCreateParams"))
async def create_memory(
    request: Request,
    memory_store_id: MemoryStoreId,
    view: View = Query("basic"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    path, content = memories.parse_memory_create(await json_body(request))
    keeper = services(request).memories
    written = await keeper.create(who.workspace_id, memory_store_id, path, content, api_actor(who))
    return JSONResponse(wire.memory(written.memory, content if view == "full" else None))


@router.get("/{memory_id}", responses=MEMORY)
async def retrieve_memory(
    request: Request,
    memory_store_id: MemoryStoreId,
    memory_id: MemoryId,
    view: View = Query("full"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    app = services(request)
    record = await app.store.get_memory(who.workspace_id, memory_store_id, memory_id)
    return JSONResponse(await shown(app.memories, record, view))


@router.post(
    "/{memory_id}", responses=MEMORY_OR_CONFLICT, openapi_extra=openapi.body("MemoryUpdateParams")
)
async def update_memory(
    request: Request,
    memory_store_id: MemoryStoreId,
    memory_id: MemoryId,
    view: View = Query("basic"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    change = memories.parse_memory_update(await json_body(request))
    keeper = services(request).memories
    written = await keeper.write(
        who.workspace_id,
        memory_store_id,
        memory_id,
        content=change.content,
        path=change.path,
        expected_sha256=change.expected_sha256,
        actor=api_actor(who),
        keep_stale=False,
    )
    return JSONResponse(await shown(keeper, written.memory, view))


@router.delete(
    "/{memory_id}",
    responses=openapi.response("beta.memory_stores.BetaManagedAgentsDeletedMemory", 409),
)
async def delete_memory(
    request: Request,
    memory_store_id: MemoryStoreId,
    memory_id: MemoryId,
    expected_content_sha256: str | None = Query(None),
    who: Caller = Depends(caller),
) -> JSONResponse:
    expected = None
    if expected_content_sha256 is not None:
        expected = memories.check_sha256("expected_content_sha256", expected_content_sha256)
    await services(request).memories.delete(
        who.workspace_id, memory_store_id, memory_id, expected, api_actor(who)
    )
    return JSONResponse({"id": memory_id, "type": "memory_deleted"})


@router.get("")
async def list_memories(
    request: Request,
    memory_store_id: MemoryStoreId,
    depth: int = Query(0, ge=0, le=1_000_000),
    limit: int = Query(20, ge=1, le=100),
    page: str | None = Query(None),
    path_prefix: str = Query("/"),
    view: View = Query("basic"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    prefix = memories.check_prefix("path_prefix", path_prefix)
    # No path is deeper than this: a larger depth lists what it lists (the SDK sets no bound).
    depth = min(depth, memories.MAX_PATH_SEGMENTS)
    if view == "full":
        limit = min(limit, FULL_PAGE)
    app = services(request)
    # The cursor is bound to the store, prefix and depth it was issued for.
    bound = pagination.listing(request, who, f"memories:{memory_store_id}:{depth}:{prefix}")
    at = pagination.page_request(bound, "asc", limit, page, CURSOR_KEY)
    if at.before is not None:
        raise RequestError(pagination.NOT_OURS)
    after = None if at.after is None else str(at.after[0])
    listing = await app.store.list_memories(
        who.workspace_id, memory_store_id, prefix, depth, after, limit
    )
    data = [
        wire.memory_prefix(item)
        if isinstance(item, MemoryPrefix)
        else await shown(app.memories, item, view)
        for item in listing.items
    ]
    next_page = None
    if listing.has_next and listing.items:
        next_page = pagination.encode(bound, "asc", (listing.items[-1].path,), "after")
    return JSONResponse({"data": data, "next_page": next_page})
