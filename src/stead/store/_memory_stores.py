"""Memory stores (see ``memories.py``): rows in one workspace each."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select, update

from stead.ids import new_id
from stead.store import _locks
from stead.store._paging import fetch_page
from stead.store.base import Page, PageRequest
from stead.store.errors import NotFound
from stead.store.memories import (
    MemoryStoreChange,
    MemoryStoreRecord,
    StoreFilter,
    store_archived,
)
from stead.store.tables import memories, memory_stores, memory_versions


def _record(row: Row[Any]) -> MemoryStoreRecord:
    return MemoryStoreRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        name=row.name,
        description=row.description,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
        archived_at=row.archived_at,
    )


def create_memory_store(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    name: str,
    description: str,
    metadata: dict[str, str],
) -> MemoryStoreRecord:
    record = MemoryStoreRecord(
        new_id("memory_store"), workspace_id, name, description, metadata, now, now, None
    )
    conn.execute(
        insert(memory_stores).values(
            id=record.id,
            workspace_id=workspace_id,
            name=name,
            description=description,
            metadata=metadata,
            created_at=now,
            updated_at=now,
        )
    )
    return record


def get_memory_store(conn: Connection, workspace_id: str, store_id: str) -> MemoryStoreRecord:
    row = conn.execute(
        select(memory_stores).where(
            memory_stores.c.id == store_id, memory_stores.c.workspace_id == workspace_id
        )
    ).first()
    if row is None:
        raise NotFound("memory_store", store_id)
    return _record(row)


def writable_store(conn: Connection, workspace_id: str, store_id: str) -> MemoryStoreRecord:
    """The store, held until commit so an archive or delete waits for this write."""
    _locks.row(conn, memory_stores, store_id, shared=True)
    return writable(get_memory_store(conn, workspace_id, store_id))


def writable(store: MemoryStoreRecord) -> MemoryStoreRecord:
    """``store``, unless it is archived (its memories read-only)."""
    if store.archived_at is not None:
        raise store_archived(store.id)
    return store


def update_memory_store(
    conn: Connection, now: datetime, workspace_id: str, store_id: str, change: MemoryStoreChange
) -> MemoryStoreRecord:
    _locks.row(conn, memory_stores, store_id)
    current = writable_store(conn, workspace_id, store_id)
    changed = {k: v for k, v in change(current).items() if getattr(current, k) != v}
    if not changed:
        return current
    conn.execute(
        update(memory_stores)
        .where(memory_stores.c.id == store_id)
        .values(**changed, updated_at=now)
    )
    return get_memory_store(conn, workspace_id, store_id)


def archive_memory_store(
    conn: Connection, now: datetime, workspace_id: str, store_id: str
) -> MemoryStoreRecord:
    _locks.row(conn, memory_stores, store_id)
    if get_memory_store(conn, workspace_id, store_id).archived_at is None:
        conn.execute(
            update(memory_stores)
            .where(memory_stores.c.id == store_id)
            .values(archived_at=now, updated_at=now)
        )
    return get_memory_store(conn, workspace_id, store_id)


def delete_memory_store(conn: Connection, now: datetime, workspace_id: str, store_id: str) -> None:
    _locks.row(conn, memory_stores, store_id)
    get_memory_store(conn, workspace_id, store_id)
    versions = memory_versions.c
    # Rows whose blob is still there stay (invisible: their store is gone) until
    # the purger has removed it; the others go now.
    conn.execute(
        update(memory_versions)
        .where(
            versions.memory_store_id == store_id,
            versions.blob_key.is_not(None),
            versions.blob_released_at.is_(None),
        )
        .values(blob_released_at=now)
    )
    conn.execute(
        delete(memory_versions).where(
            versions.memory_store_id == store_id, versions.blob_key.is_(None)
        )
    )
    conn.execute(delete(memories).where(memories.c.memory_store_id == store_id))
    conn.execute(delete(memory_stores).where(memory_stores.c.id == store_id))


def list_memory_stores(
    conn: Connection, workspace_id: str, page: PageRequest, where: StoreFilter
) -> Page[MemoryStoreRecord]:
    stores = memory_stores.c
    stmt = select(memory_stores).where(stores.workspace_id == workspace_id)
    if not where.include_archived:
        stmt = stmt.where(stores.archived_at.is_(None))
    if where.created_gte is not None:
        stmt = stmt.where(stores.created_at >= where.created_gte)
    if where.created_lte is not None:
        stmt = stmt.where(stores.created_at <= where.created_lte)
    return fetch_page(conn, stmt, [stores.created_at, stores.id], page, _record)
