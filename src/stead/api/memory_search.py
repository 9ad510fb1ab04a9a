"""``POST /v1/memory_stores/{id}/search``: stead's semantic search over a store's
memories (beyond the hosted API).

Body ``{"query": str, "limit"?: 1-100 (10), "path_prefix"?: "/dir/"}``; answers
``{"data": [{"type": "memory_search_result", "memory_id", "memory_version_id",
"path", "score"}]}``, best first, ``score`` the cosine similarity of the query
and the memory's current content (all-MiniLM-L6-v2, run in the server).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from stead.api import openapi
from stead.api.body import json_body
from stead.api.deps import Caller, caller, services
from stead.api.params import MemoryStoreId
from stead.api.wire import JSONResponse
from stead.schemas import memories

router = APIRouter(prefix="/v1/memory_stores/{memory_store_id}/search", tags=["memory_stores"])


@router.post("", responses=openapi.errors(404))
async def search_memories(
    request: Request, memory_store_id: MemoryStoreId, who: Caller = Depends(caller)
) -> JSONResponse:
    query, limit, prefix = memories.parse_search(await json_body(request))
    hits = await services(request).memories.search(
        who.workspace_id, memory_store_id, query, limit, prefix
    )
    return JSONResponse(
        {
            "data": [
                {
                    "type": "memory_search_result",
                    "memory_id": hit.memory_id,
                    "memory_version_id": hit.version_id,
                    "path": hit.path,
                    "score": round(hit.score, 6),
                }
                for hit in hits
            ]
        }
    )
