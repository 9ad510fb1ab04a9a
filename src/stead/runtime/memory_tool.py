"""The memory search tool (``harness.MEMORY_SEARCH``): the model asks for
memories by meaning across the session's memory stores. It runs here in the
brain, like the web tools: it never touches the session's sandbox, reads only
the store and the blob store, and changes nothing (a call in doubt after a
crash simply runs again). Each result cites the memory's id, its current
version's id and the file it is at in the sandbox.
"""

from __future__ import annotations

from typing import Protocol

from stead.harness import MEMORY_SEARCH
from stead.jsonvalues import Json
from stead.runtime.memories import MemoryKeeper, SearchHit
from stead.runtime.memory_mounts import MemoryMount, MemorySession
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
        mounts = {m.memory_store_id: m for m in MemorySession.of(session).mounts}
        if not mounts:
            return ToolOutcome.error(f"{MEMORY_SEARCH}: this session has no memory stores")
        # A store deleted since is passed over: nothing to find there.
        best = await self._keeper.search_stores(
            session.workspace_id, list(mounts), query, limit, prefix, missing_ok=True
        )
        if not best:
            return ToolOutcome.text("No memories match.")
        blocks = [await self._cite(session.workspace_id, hit, mounts[sid]) for sid, hit in best]
        return ToolOutcome.text("\n\n".join(blocks))

    async def _cite(self, workspace_id: str, hit: SearchHit, mount: MemoryMount) -> str:
        head = (
            f"{mount.file(hit.path)} (memory {hit.memory_id}, version {hit.version_id}, "
            f"score {hit.score:.3f})"
        )
        try:
            memory: MemoryRecord = await self._store.get_memory(
                workspace_id, mount.memory_store_id, hit.memory_id
            )
        except NotFound:
            return f"{head}\n(deleted since)"
        content = await self._keeper.content(memory) or ""
        more = "…" if len(content) > SNIPPET_CHARS else ""
        return f"{head}\n{content[:SNIPPET_CHARS]}{more}"
