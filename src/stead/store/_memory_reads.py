"""Listings of memories (by path, with prefix roll-up) and of memory versions."""

from __future__ import annotations

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


def _end_of(prefix: str) -> str:
    """The first path after every path that starts with ``prefix`` (which ends in
    ``/``): paths compare bytewise and ``0`` follows ``/``."""
    return prefix[:-1] + "0"


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
    items: list[MemoryRecord | MemoryPrefix] = []
    # ``after`` is the last item shown: a memory's path, or a marker's (ending in /).
    if after is None:
        low, inclusive = prefix, True
    elif after.endswith("/"):
        low, inclusive = _end_of(after), True
    else:
        low, inclusive = after, False
    high = _end_of(prefix)
    while len(items) <= limit:
        stmt = select(memories).where(
            M.memory_store_id == store_id,
            M.path >= low if inclusive else M.path > low,
            M.path < high,
        )
        rows = conn.execute(stmt.order_by(M.path).limit(limit + 1 - len(items))).all()
        if not rows:
            break
        for row in rows:
            segments = row.path[len(prefix) :].split("/")
            if depth and len(segments) > depth:
                # Everything below the marker is skipped in one step.
                marker = prefix + "/".join(segments[:depth]) + "/"
                items.append(MemoryPrefix(marker))
                low, inclusive = _end_of(marker), True
                break
            items.append(memory_record(row))
            low, inclusive = row.path, False
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
            M.path < _end_of(prefix),
            V.embedding.is_not(None),
        )
    ).all()
    return [MemoryVector(r.id, r.version_id, r.path, bytes(r.embedding)) for r in rows]
