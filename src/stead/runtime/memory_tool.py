"""The memory search tool (``harness.MEMORY_SEARCH``): the model asks for
memories by meaning across the session's memory stores. It runs here in the
brain, like the web tools: it never touches the session's sandbox, reads only
the store and the blob store, and changes nothing (a call in doubt after a
crash simply runs again). Each result cites the memory's id, its current
version's id and the file it is at in the sandbox.
"""

from __future__ import annotations

import heapq
from typing import Protocol

from stead.harness import MEMORY_SEARCH
from stead.jsonvalues import Json
from stead.runtime.memories import MemoryKeeper, SearchHit
from stead.schemas import RequestError, memories
from stead.store import MemoryRecord, MemoryStoreStore, NotFound, SessionStore
from stead.tools import ToolOutcome

SNIPPET_CHARS = 400
"""How much of each memory a result shows; the agent reads the file for the rest."""

DEFINITION: Json = {
    "name": MEMORY_SEARCH,
    "description": (
        "Search this session's memory stores by meaning: returns the memories whose "
        "content is closest to the query, best first, each with its file path in the "
        "sandbox, its memory and version ids, a similarity score and the start of its "
        "content. Read or change a memory through its file."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in plain words."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "description": "How many results (default 10).",
            },
            "path_prefix": {
                "type": "string",
                "description": "Only memories below this path in each store, ending in '/'.",
            },
        },
        "required": ["query"],
    },
}


class MemorySearchStore(SessionStore, MemoryStoreStore, Protocol):
    """What the search tool reads: the session's resources and its stores' memories."""


class MemorySearchTool:
    def __init__(self, store: MemorySearchStore, keeper: MemoryKeeper) -> None:
        self._store = store
        self._keeper = keeper

    async def run(self, session_id: str, tool_input: Json) -> ToolOutcome:
        try:
            query, limit, prefix = memories.parse_search(tool_input)
        except RequestError as exc:
            return ToolOutcome.error(f"{MEMORY_SEARCH}: {exc}")
        session = await self._store.session_snapshot(session_id)
        mounts = {
            str(r["memory_store_id"]): str(r["mount_path"])
            for r in session.resources
            if r.get("type") == "memory_store"
        }
        if not mounts:
            return ToolOutcome.error(f"{MEMORY_SEARCH}: this session has no memory stores")
        found: list[tuple[SearchHit, str, str]] = []
        for store_id, mount_path in mounts.items():
            try:
                hits = await self._keeper.search(
                    session.workspace_id, store_id, query, limit, prefix
                )
            except NotFound:
                continue  # the store was deleted: nothing to find there
            found += [(hit, store_id, mount_path) for hit in hits]
        best = heapq.nlargest(limit, found, key=lambda item: item[0].score)
        if not best:
            return ToolOutcome.text("No memories match.")
        blocks = [await self._cite(session.workspace_id, *item) for item in best]
        return ToolOutcome.text("\n\n".join(blocks))

    async def _cite(self, workspace_id: str, hit: SearchHit, store_id: str, mount: str) -> str:
        head = (
            f"{mount}{hit.path} (memory {hit.memory_id}, version {hit.version_id}, "
            f"score {hit.score:.3f})"
        )
        try:
            memory: MemoryRecord = await self._store.get_memory(
                workspace_id, store_id, hit.memory_id
            )
        except NotFound:
            return f"{head}\n(deleted since)"
        content = await self._keeper.content(memory) or ""
        more = "…" if len(content) > SNIPPET_CHARS else ""
        return f"{head}\n{content[:SNIPPET_CHARS]}{more}"
