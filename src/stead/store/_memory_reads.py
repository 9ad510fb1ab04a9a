"""Listings of memories (by path, with prefix roll-up) and of memory versions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Connection, select

from stead.store._memories import V, memory_record, version_record
from stead.store._memory_stores import get_memory_store
from stead.store._paging import fetch_page
from stead.store.base import Page, PageRequest
from stead.store.memories import (
    MemoryListing,
    MemoryPrefix,
    MemoryRecord,
    MemoryVector,
    MemoryVersionRecord,
    VersionFilter,
)
from stead.store.tables import memories, memory_versions

M = memories.c


def end_of(prefix: str) -> str:
    """The first path after every path that starts with ``prefix`` (which ends in
    ``/``): paths compare bytewise and ``0`` follows ``/``."""
    return prefix[:-1] + "0"


Fetch = Callable[[str, bool, str, int], Sequence[MemoryRecord]]
"""(low, whether low itself counts, high, n): the first ``n`` memories of the
store by path in [low, high) (or (low, high)), in path order."""


def list_memories(
    conn: Connection,
    workspace_id: str,
    store_id: str,
    prefix: str,
    depth: int,
    after: str | None,
    limit: int,
) -> MemoryListing:
    get_memory_store(conn, workspace_id, store_id)

    def fetch(low: str, inclusive: bool, high: str, n: int) -> list[MemoryRecord]:
        stmt = select(memories).where(
            M.memory_store_id == store_id,
            M.path >= low if inclusive else M.path > low,
            M.path < high,
        )
        return [memory_record(row) for row in conn.execute(stmt.order_by(M.path).limit(n))]

    return listing(fetch, prefix, depth, after, limit)


def listing(fetch: Fetch, prefix: str, depth: int, after: str | None, limit: int) -> MemoryListing:
    """``list_memories`` over ``fetch``: memories below ``prefix`` after ``after``,
    those more than ``depth`` segments down rolled up into prefix markers."""
    items: list[MemoryRecord | MemoryPrefix] = []
    # ``after`` is the last item shown: a memory's path, or a marker's (ending in /).
    if after is None:
        low, inclusive = prefix, True
    elif after.endswith("/"):
        low, inclusive = end_of(after), True
    else:
        low, inclusive = after, False
    high = end_of(prefix)
    while len(items) <= limit:
        found = fetch(low, inclusive, high, limit + 1 - len(items))
        if not found:
            break
        for memory in found:
            segments = memory.path[len(prefix) :].split("/")
            if depth and len(segments) > depth:
                # Everything below the marker is skipped in one step.
                marker = prefix + "/".join(segments[:depth]) + "/"
                items.append(MemoryPrefix(marker))
                low, inclusive = end_of(marker), True
                break
            items.append(memory)
            low, inclusive = memory.path, False
    return MemoryListing(items[:limit], has_next=len(items) > limit)


def list_memory_versions(
    conn: Connection, workspace_id: str, store_id: str, where: VersionFilter, page: PageRequest
) -> Page[MemoryVersionRecord]:
    get_memory_store(conn, workspace_id, store_id)
    stmt = select(memory_versions).where(V.memory_store_id == store_id, V.committed_at.is_not(None))
    if where.memory_id is not None:
        stmt = stmt.where(V.memory_id == where.memory_id)
    if where.operation is not None:
        stmt = stmt.where(V.operation == where.operation)
    for actor in where.actors:
        stmt = stmt.where(V.actor_type == actor.type, V.actor_id == actor.id)
    if where.created_gte is not None:
        stmt = stmt.where(V.created_at >= where.created_gte)
    if where.created_lte is not None:
        stmt = stmt.where(V.created_at <= where.created_lte)
    return fetch_page(conn, stmt, [V.created_at, V.id], page, version_record)


def memory_vectors(
    conn: Connection, workspace_id: str, store_id: str, prefix: str
) -> list[MemoryVector]:
    get_memory_store(conn, workspace_id, store_id)
    rows = conn.execute(
        select(M.id, M.version_id, M.path, V.embedding)
        .join(memory_versions, V.id == M.version_id)
        .where(
            M.memory_store_id == store_id,
            M.path >= prefix,
            M.path < end_of(prefix),
            V.embedding.is_not(None),
        )
    ).all()
    return [MemoryVector(r.id, r.version_id, r.path, bytes(r.embedding)) for r in rows]
