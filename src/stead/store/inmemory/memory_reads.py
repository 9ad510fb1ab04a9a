"""Listings of memories and of memory versions, and the vectors search reads,
in memory (``_memory_reads.py``'s rules: the listing's walk with its prefix
roll-up is its function, given the memories by path)."""

from __future__ import annotations

from stead.store._memories import version_record
from stead.store._memory_reads import end_of, listing
from stead.store.inmemory import memory_stores
from stead.store.inmemory.tables import Tables, page_of
from stead.store.memories import (
    MemoryListing,
    MemoryRecord,
    MemoryVector,
    MemoryVersionRecord,
    VersionFilter,
)
from stead.store.paging import Page, PageRequest


def list_memories(
    t: Tables,
    workspace_id: str,
    store_id: str,
    prefix: str,
    depth: int,
    after: str | None,
    limit: int,
) -> MemoryListing:
    memory_stores.get(t, workspace_id, store_id)
    # Python orders str by code point, as UTF-8 bytes order: the SQL store's order.
    by_path = sorted(
        (m for m in t.memories.values() if m.memory_store_id == store_id), key=lambda m: m.path
    )

    def fetch(low: str, inclusive: bool, high: str, n: int) -> list[MemoryRecord]:
        found = (
            m for m in by_path if (m.path >= low if inclusive else m.path > low) and m.path < high
        )
        return [m for _, m in zip(range(n), found, strict=False)]

    return listing(fetch, prefix, depth, after, limit)


def list_versions(
    t: Tables, workspace_id: str, store_id: str, where: VersionFilter, page: PageRequest
) -> Page[MemoryVersionRecord]:
    memory_stores.get(t, workspace_id, store_id)
    rows = [
        row
        for row in t.memory_versions.values()
        if row.memory_store_id == store_id
        and row.committed_at is not None
        and where.memory_id in (None, row.memory_id)
        and where.operation in (None, row.operation)
        and all((a.type, a.id) == (row.actor_type, row.actor_id) for a in where.actors)
        and (where.created_gte is None or row.created_at >= where.created_gte)
        and (where.created_lte is None or row.created_at <= where.created_lte)
    ]
    found = page_of(rows, lambda row: (row.created_at, row.id), page)
    return Page([version_record(row) for row in found.items], found.has_next, found.has_prev)


def vectors(t: Tables, workspace_id: str, store_id: str, prefix: str) -> list[MemoryVector]:
    memory_stores.get(t, workspace_id, store_id)
    found = []
    for m in t.memories.values():
        if m.memory_store_id != store_id or not prefix <= m.path < end_of(prefix):
            continue
        version = t.memory_versions.get(m.version_id)
        if version is not None and version.embedding is not None:
            found.append(MemoryVector(m.id, m.version_id, m.path, version.embedding))
    return found
