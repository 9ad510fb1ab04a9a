"""Memory stores in memory (``_memory_stores.py``'s rules; which store may be
written is its function)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from stead.ids import new_id
from stead.store._memory_stores import writable
from stead.store._sessions import changed
from stead.store.errors import NotFound
from stead.store.inmemory.tables import Tables, held, page_of
from stead.store.memories import MemoryStoreChange, MemoryStoreRecord, StoreFilter
from stead.store.paging import Page, PageRequest

JSON = ("metadata",)


def create(
    t: Tables,
    now: datetime,
    workspace_id: str,
    name: str,
    description: str,
    metadata: dict[str, str],
) -> MemoryStoreRecord:
    record = MemoryStoreRecord(
        new_id("memory_store"), workspace_id, name, description, metadata, now, now, None
    )
    t.memory_stores[record.id] = held(record, *JSON)
    return get(t, workspace_id, record.id)


def get(t: Tables, workspace_id: str, store_id: str) -> MemoryStoreRecord:
    found = t.memory_stores.get(store_id)
    if found is None or found.kept.workspace_id != workspace_id:
        raise NotFound("memory_store", store_id)
    return found.record()


def writable_store(t: Tables, workspace_id: str, store_id: str) -> MemoryStoreRecord:
    return writable(get(t, workspace_id, store_id))


def update(
    t: Tables, now: datetime, workspace_id: str, store_id: str, change: MemoryStoreChange
) -> MemoryStoreRecord:
    current = writable_store(t, workspace_id, store_id)
    values = changed(current, change(current))
    if not values:
        return current
    t.memory_stores[store_id] = held(replace(current, **values, updated_at=now), *JSON)
    return get(t, workspace_id, store_id)


def archive(t: Tables, now: datetime, workspace_id: str, store_id: str) -> MemoryStoreRecord:
    current = get(t, workspace_id, store_id)
    if current.archived_at is None:
        current = replace(current, archived_at=now, updated_at=now)
        t.memory_stores[store_id] = held(current, *JSON)
    return current


def delete(t: Tables, now: datetime, workspace_id: str, store_id: str) -> None:
    get(t, workspace_id, store_id)
    # Versions whose blob is still there stay (invisible: their store is gone)
    # until the purger has removed it; the others go now.
    for version_id, row in list(t.memory_versions.items()):
        if row.memory_store_id != store_id:
            continue
        if row.blob_key is None:
            del t.memory_versions[version_id]
        elif row.blob_released_at is None:
            t.memory_versions[version_id] = replace(row, blob_released_at=now)
    for memory_id in [k for k, m in t.memories.items() if m.memory_store_id == store_id]:
        del t.memories[memory_id]
    del t.memory_stores[store_id]


def list_(
    t: Tables, workspace_id: str, page: PageRequest, where: StoreFilter
) -> Page[MemoryStoreRecord]:
    rows = [
        s.kept
        for s in t.memory_stores.values()
        if s.kept.workspace_id == workspace_id
        and (where.include_archived or s.kept.archived_at is None)
        and (where.created_gte is None or s.kept.created_at >= where.created_gte)
        and (where.created_lte is None or s.kept.created_at <= where.created_lte)
    ]
    found = page_of(rows, lambda s: (s.created_at, s.id), page)
    items = [t.memory_stores[s.id].record() for s in found.items]
    return Page(items, found.has_next, found.has_prev)
