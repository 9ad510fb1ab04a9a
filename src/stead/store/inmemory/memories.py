"""Writes of memories and their versions in memory (``_memories.py``'s rules:
a path's owner, a stale write and what may be redacted are its functions, and
its ``version_record`` reads these rows). A version is pending until its write
commits; a blob that must go is marked released for the purger."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from stead.store._memories import (
    check_redactable,
    deleted_version,
    path_free,
    pending_version,
    stale,
    version_record,
)
from stead.store.errors import NotFound
from stead.store.inmemory import memory_mounts, memory_stores
from stead.store.inmemory.tables import MemoryVersionRow, Tables
from stead.store.memories import (
    Actor,
    MemoryRecord,
    MemoryVersionRecord,
    MemoryWrite,
    MountClaim,
    NewVersion,
)


def get_memory(t: Tables, workspace_id: str, store_id: str, memory_id: str) -> MemoryRecord:
    memory_stores.get(t, workspace_id, store_id)
    found = t.memories.get(memory_id)
    if found is None or found.memory_store_id != store_id:
        raise NotFound("memory", memory_id)
    return found


def get_version(
    t: Tables, workspace_id: str, store_id: str, version_id: str
) -> MemoryVersionRecord:
    memory_stores.get(t, workspace_id, store_id)
    row = t.memory_versions.get(version_id)
    if row is None or row.memory_store_id != store_id or row.committed_at is None:
        raise NotFound("memory_version", version_id)
    return version_record(row)


def begin(t: Tables, now: datetime, new: NewVersion) -> None:
    memory_stores.writable_store(t, new.workspace_id, new.memory_store_id)
    t.memory_versions[new.id] = MemoryVersionRow(**pending_version(now, new))


def _pending(t: Tables, workspace_id: str, version_id: str) -> MemoryVersionRow:
    row = t.memory_versions.get(version_id)
    if row is not None and row.workspace_id == workspace_id:
        memory_stores.writable_store(t, workspace_id, row.memory_store_id)
    if (
        row is None
        or row.workspace_id != workspace_id
        or row.committed_at is not None
        or row.blob_released_at is not None
    ):  # the purger gave it up (the writer ran past the grace) or the store went
        raise NotFound("memory_version", version_id)
    return row


def _path_taken(t: Tables, store_id: str, path: str, memory_id: str) -> None:
    other = next(
        (
            m.id
            for m in t.memories.values()
            if m.memory_store_id == store_id and m.path == path and m.id != memory_id
        ),
        None,
    )
    path_free(path, other)


def _commit(
    t: Tables, now: datetime, version_id: str, operation: str, path: str
) -> MemoryVersionRecord:
    # Stamped when committed: versions list in the order their writes took effect.
    row = replace(
        t.memory_versions[version_id],
        operation=operation,
        path=path,
        created_at=now,
        committed_at=now,
    )
    t.memory_versions[version_id] = row
    return version_record(row)


def _memory(
    pending: MemoryVersionRow, path: str, created_at: datetime, now: datetime
) -> MemoryRecord:
    assert pending.content_sha256 is not None and pending.content_size_bytes is not None
    assert pending.blob_key is not None
    return MemoryRecord(
        id=pending.memory_id,
        memory_store_id=pending.memory_store_id,
        path=path,
        content_sha256=pending.content_sha256,
        content_size_bytes=pending.content_size_bytes,
        version_id=pending.id,
        blob_key=pending.blob_key,
        created_at=created_at,
        updated_at=now,
    )


def commit_create(
    t: Tables, now: datetime, workspace_id: str, version_id: str, mount: MountClaim | None
) -> MemoryWrite:
    pending = _pending(t, workspace_id, version_id)
    store_id = pending.memory_store_id
    assert pending.path is not None and pending.content_sha256 is not None
    _path_taken(t, store_id, pending.path, pending.memory_id)
    if mount is not None:
        memory_mounts.move(
            t, now, workspace_id, store_id, mount, pending.memory_id, pending.content_sha256
        )
    t.memories[pending.memory_id] = _memory(pending, pending.path, now, now)
    version = _commit(t, now, version_id, "created", pending.path)
    return MemoryWrite(t.memories[pending.memory_id], version, False)


def commit_write(
    t: Tables,
    now: datetime,
    workspace_id: str,
    version_id: str,
    expected_sha256: str | None,
    keep_stale: bool,
    mount: MountClaim | None,
) -> MemoryWrite:
    pending = _pending(t, workspace_id, version_id)
    store_id = pending.memory_store_id
    current = get_memory(t, workspace_id, store_id, pending.memory_id)
    path = current.path if pending.path is None else pending.path
    moved = stale("precondition.content_sha256", expected_sha256, current, keep_stale)
    if mount is not None:
        memory_mounts.move(
            t, now, workspace_id, store_id, mount, current.id, pending.content_sha256
        )
    if moved:
        # Both contents stay: this one as a version beside the memory's current one.
        return MemoryWrite(current, _commit(t, now, version_id, "modified", path), True)
    _path_taken(t, store_id, path, current.id)
    t.memories[current.id] = _memory(pending, path, current.created_at, now)
    version = _commit(t, now, version_id, "modified", path)
    return MemoryWrite(t.memories[current.id], version, False)


def release(t: Tables, now: datetime, version_id: str) -> None:
    row = t.memory_versions.get(version_id)
    if row is not None and row.committed_at is None and row.blob_released_at is None:
        t.memory_versions[version_id] = replace(row, blob_released_at=now)


def delete_memory(
    t: Tables,
    now: datetime,
    workspace_id: str,
    store_id: str,
    memory_id: str,
    expected_sha256: str | None,
    actor: Actor,
    version_id: str,
    mount: MountClaim | None,
) -> None:
    current = get_memory(t, workspace_id, store_id, memory_id)
    stale("expected_content_sha256", expected_sha256, current, keep=False)
    if mount is not None:
        memory_mounts.move(t, now, workspace_id, store_id, mount, memory_id, None)
    values = deleted_version(now, version_id, current, workspace_id, actor)
    t.memory_versions[version_id] = MemoryVersionRow(**values)
    del t.memories[memory_id]


def redact(
    t: Tables, now: datetime, workspace_id: str, store_id: str, version_id: str, actor: Actor
) -> MemoryVersionRecord:
    version = get_version(t, workspace_id, store_id, version_id)
    if version.redacted_at is not None:
        return version
    current = next((m.id for m in t.memories.values() if m.version_id == version_id), None)
    check_redactable(version_id, current)
    row = replace(
        t.memory_versions[version_id],
        path=None,
        content_sha256=None,
        content_size_bytes=None,
        redacted_at=now,
        redacted_by_type=actor.type,
        redacted_by_id=actor.id,
        embedding=None,
        blob_released_at=now if version.blob_key is not None else None,
    )
    t.memory_versions[version_id] = row
    return version_record(row)


def blobs_to_purge(
    t: Tables, now: datetime, pending_before: datetime, limit: int
) -> list[tuple[str, str]]:
    # An abandoned pending version is released first, so a writer still running
    # past the grace finds it gone and does not commit it.
    for version_id, row in list(t.memory_versions.items()):
        abandoned = row.committed_at is None and row.created_at < pending_before
        if abandoned and row.blob_released_at is None:
            t.memory_versions[version_id] = replace(row, blob_released_at=now)
    released = [
        row
        for row in t.memory_versions.values()
        if row.blob_released_at is not None and row.blob_key is not None
    ]
    released.sort(key=lambda row: (row.blob_released_at, row.id))
    return [(row.id, row.blob_key) for row in released[:limit] if row.blob_key is not None]


def forget_blob(t: Tables, _now: datetime, version_id: str) -> None:
    row = t.memory_versions.get(version_id)
    if row is None or row.blob_released_at is None:
        return
    if row.committed_at is None or row.memory_store_id not in t.memory_stores:
        del t.memory_versions[version_id]
    else:
        t.memory_versions[version_id] = replace(row, blob_key=None, blob_released_at=None)
