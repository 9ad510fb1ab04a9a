"""Writes of memories and their versions (see ``memories.py``).

A version is inserted pending (``committed_at`` null) before its blob is
written and committed after; only committed versions are visible. A blob that
must go (a refused write, a redaction, a deleted store) is marked with
``blob_released_at`` in the transaction that made it unwanted, and the purger
removes it, then forgets it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, and_, delete, insert, or_, select, update

from stead.store import _locks, _memory_mounts
from stead.store._memory_stores import get_memory_store, writable_store
from stead.store.errors import Conflict, NotFound
from stead.store.memories import (
    PATH_CONFLICT,
    Actor,
    MemoryRecord,
    MemoryVersionRecord,
    MemoryWrite,
    MountClaim,
    NewVersion,
    precondition_failed,
)
from stead.store.tables import memories, memory_stores, memory_versions

V = memory_versions.c


def _actor(kind: str | None, ident: str | None) -> Actor | None:
    return None if kind is None or ident is None else Actor(kind, ident)


def memory_record(row: Row[Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row.id,
        memory_store_id=row.memory_store_id,
        path=row.path,
        content_sha256=row.content_sha256,
        content_size_bytes=row.content_size_bytes,
        version_id=row.version_id,
        blob_key=row.blob_key,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def version_record(row: Any) -> MemoryVersionRecord:
    """The version of a ``memory_versions`` row (or a row of the in-memory store)."""
    # A redacted version's blob may still await the purger: it is no longer its content.
    blob_key = None if row.redacted_at is not None else row.blob_key
    return MemoryVersionRecord(
        id=row.id,
        memory_store_id=row.memory_store_id,
        memory_id=row.memory_id,
        operation=row.operation,
        path=row.path,
        content_sha256=row.content_sha256,
        content_size_bytes=row.content_size_bytes,
        blob_key=blob_key,
        created_by=_actor(row.actor_type, row.actor_id),
        created_at=row.created_at,
        redacted_at=row.redacted_at,
        redacted_by=_actor(row.redacted_by_type, row.redacted_by_id),
    )


def get_memory(conn: Connection, workspace_id: str, store_id: str, memory_id: str) -> MemoryRecord:
    get_memory_store(conn, workspace_id, store_id)
    row = conn.execute(
        select(memories).where(memories.c.id == memory_id, memories.c.memory_store_id == store_id)
    ).first()
    if row is None:
        raise NotFound("memory", memory_id)
    return memory_record(row)


def get_version(
    conn: Connection, workspace_id: str, store_id: str, version_id: str
) -> MemoryVersionRecord:
    get_memory_store(conn, workspace_id, store_id)
    row = conn.execute(
        select(memory_versions).where(
            V.id == version_id, V.memory_store_id == store_id, V.committed_at.is_not(None)
        )
    ).first()
    if row is None:
        raise NotFound("memory_version", version_id)
    return version_record(row)


def begin_memory_version(conn: Connection, now: datetime, new: NewVersion) -> None:
    writable_store(conn, new.workspace_id, new.memory_store_id)
    conn.execute(insert(memory_versions).values(**pending_version(now, new)))


def pending_version(now: datetime, new: NewVersion) -> dict[str, Any]:
    """The ``memory_versions`` columns of ``new``, pending (not committed)."""
    return {
        "id": new.id,
        "workspace_id": new.workspace_id,
        "memory_store_id": new.memory_store_id,
        "memory_id": new.memory_id,
        "operation": "modified",
        "path": new.path,
        "content_sha256": new.content_sha256,
        "content_size_bytes": new.content_size_bytes,
        "blob_key": new.blob_key,
        "actor_type": new.actor.type,
        "actor_id": new.actor.id,
        "created_at": now,
        "embedding": new.embedding,
    }


def deleted_version(
    now: datetime, version_id: str, current: MemoryRecord, workspace_id: str, actor: Actor
) -> dict[str, Any]:
    """The ``memory_versions`` columns of the committed ``deleted`` version of ``current``."""
    return {
        "id": version_id,
        "workspace_id": workspace_id,
        "memory_store_id": current.memory_store_id,
        "memory_id": current.id,
        "operation": "deleted",
        "path": current.path,
        "actor_type": actor.type,
        "actor_id": actor.id,
        "created_at": now,
        "committed_at": now,
    }


def _pending(conn: Connection, workspace_id: str, version_id: str) -> Row[Any]:
    """The pending version, with its store held first (the order every memory
    write takes: store, version, memory) and checked writable. Two writers that
    take one path on PostgreSQL both find it free; the second's insert is a
    unique violation, which the connection worker retries, and then it sees it taken."""
    store_id = conn.execute(
        select(V.memory_store_id).where(V.id == version_id, V.workspace_id == workspace_id)
    ).scalar()
    if store_id is not None:
        writable_store(conn, workspace_id, store_id)
    _locks.row(conn, memory_versions, version_id)
    row = conn.execute(
        select(memory_versions).where(
            V.id == version_id,
            V.workspace_id == workspace_id,
            V.committed_at.is_(None),
            V.blob_released_at.is_(None),
        )
    ).first()
    if row is None:  # the purger gave it up (the writer ran past the grace) or the store went
        raise NotFound("memory_version", version_id)
    return row


def _path_taken(conn: Connection, store_id: str, path: str, memory_id: str) -> None:
    other = conn.execute(
        select(memories.c.id).where(
            memories.c.memory_store_id == store_id,
            memories.c.path == path,
            memories.c.id != memory_id,
        )
    ).scalar()
    path_free(path, other)


def path_free(path: str, other: str | None) -> None:
    """Refuses ``path`` when memory ``other`` (not the one being written) is there."""
    if other is not None:
        raise Conflict(
            f"path: memory {other} is already at {path!r}",
            code=PATH_CONFLICT,
            details={"conflicting_memory_id": other},
        )


def stale(field: str, expected_sha256: str | None, current: MemoryRecord, keep: bool) -> bool:
    """Whether a write based on ``expected_sha256`` is stale (the memory moved on);
    a stale one is refused on ``field`` unless it is to be ``keep``-t as a version."""
    moved = expected_sha256 is not None and expected_sha256 != current.content_sha256
    if moved and not keep:
        raise precondition_failed(field, current)
    return moved


def check_redactable(version_id: str, current_of: str | None) -> None:
    """Refuses to redact the version that memory ``current_of`` holds now."""
    if current_of is not None:
        raise Conflict(
            f"memory version {version_id} is the current content of memory {current_of}: "
            "update or delete the memory first"
        )


def _commit(
    conn: Connection, now: datetime, version_id: str, operation: str, path: str
) -> MemoryVersionRecord:
    # Written when committed: versions list in the order their writes took effect.
    conn.execute(
        update(memory_versions)
        .where(V.id == version_id)
        .values(operation=operation, path=path, created_at=now, committed_at=now)
    )
    row = conn.execute(select(memory_versions).where(V.id == version_id)).one()
    return version_record(row)


def commit_memory_create(
    conn: Connection, now: datetime, workspace_id: str, version_id: str, mount: MountClaim | None
) -> MemoryWrite:
    pending = _pending(conn, workspace_id, version_id)
    store_id = pending.memory_store_id
    _path_taken(conn, store_id, pending.path, pending.memory_id)
    if mount is not None:
        _memory_mounts.move(
            conn, now, workspace_id, store_id, mount, pending.memory_id, pending.content_sha256
        )
    conn.execute(
        insert(memories).values(
            id=pending.memory_id,
            memory_store_id=store_id,
            path=pending.path,
            content_sha256=pending.content_sha256,
            content_size_bytes=pending.content_size_bytes,
            version_id=version_id,
            blob_key=pending.blob_key,
            created_at=now,
            updated_at=now,
        )
    )
    version = _commit(conn, now, version_id, "created", pending.path)
    return MemoryWrite(get_memory(conn, workspace_id, store_id, pending.memory_id), version, False)


def commit_memory_write(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    version_id: str,
    expected_sha256: str | None,
    keep_stale: bool,
    mount: MountClaim | None,
) -> MemoryWrite:
    pending = _pending(conn, workspace_id, version_id)
    store_id = pending.memory_store_id
    _locks.row(conn, memories, pending.memory_id)
    current = get_memory(conn, workspace_id, store_id, pending.memory_id)
    path = current.path if pending.path is None else pending.path
    moved = stale("precondition.content_sha256", expected_sha256, current, keep_stale)
    if mount is not None:
        _memory_mounts.move(
            conn, now, workspace_id, store_id, mount, current.id, pending.content_sha256
        )
    if moved:
        # Both contents stay: this one as a version beside the memory's current one.
        return MemoryWrite(current, _commit(conn, now, version_id, "modified", path), True)
    _path_taken(conn, store_id, path, current.id)
    conn.execute(
        update(memories)
        .where(memories.c.id == current.id)
        .values(
            path=path,
            content_sha256=pending.content_sha256,
            content_size_bytes=pending.content_size_bytes,
            version_id=version_id,
            blob_key=pending.blob_key,
            updated_at=now,
        )
    )
    version = _commit(conn, now, version_id, "modified", path)
    return MemoryWrite(get_memory(conn, workspace_id, store_id, current.id), version, False)


def release_memory_version(conn: Connection, now: datetime, version_id: str) -> None:
    conn.execute(
        update(memory_versions)
        .where(V.id == version_id, V.committed_at.is_(None), V.blob_released_at.is_(None))
        .values(blob_released_at=now)
    )


def delete_memory(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    store_id: str,
    memory_id: str,
    expected_sha256: str | None,
    actor: Actor,
    version_id: str,
    mount: MountClaim | None,
) -> None:
    # Deleting is allowed in an archived store, so the store is only held, not checked.
    _locks.row(conn, memory_stores, store_id, shared=True)
    _locks.row(conn, memories, memory_id)
    current = get_memory(conn, workspace_id, store_id, memory_id)
    stale("expected_content_sha256", expected_sha256, current, keep=False)
    if mount is not None:
        _memory_mounts.move(conn, now, workspace_id, store_id, mount, memory_id, None)
    values = deleted_version(now, version_id, current, workspace_id, actor)
    conn.execute(insert(memory_versions).values(**values))
    conn.execute(delete(memories).where(memories.c.id == memory_id))


def redact_memory_version(
    conn: Connection, now: datetime, workspace_id: str, store_id: str, version_id: str, actor: Actor
) -> MemoryVersionRecord:
    _locks.row(conn, memory_stores, store_id, shared=True)
    _locks.row(conn, memory_versions, version_id)
    version = get_version(conn, workspace_id, store_id, version_id)
    if version.redacted_at is not None:
        return version
    current = conn.execute(
        select(memories.c.id).where(memories.c.version_id == version_id)
    ).scalar()
    check_redactable(version_id, current)
    conn.execute(
        update(memory_versions)
        .where(V.id == version_id)
        .values(
            path=None,
            content_sha256=None,
            content_size_bytes=None,
            redacted_at=now,
            redacted_by_type=actor.type,
            redacted_by_id=actor.id,
            embedding=None,
            blob_released_at=now if version.blob_key is not None else None,
        )
    )
    return get_version(conn, workspace_id, store_id, version_id)


def _purgeable(pending_before: datetime) -> Any:
    return or_(
        V.blob_released_at.is_not(None),
        and_(V.committed_at.is_(None), V.created_at < pending_before),
    )


def anything_to_purge(conn: Connection, pending_before: datetime) -> bool:
    found = conn.execute(
        select(V.id).where(V.blob_key.is_not(None), _purgeable(pending_before)).limit(1)
    ).first()
    return found is not None


def memory_blobs_to_purge(
    conn: Connection, now: datetime, pending_before: datetime, limit: int
) -> list[tuple[str, str]]:
    # An abandoned pending version is released first, so a writer still running
    # past the grace finds it gone and does not commit it.
    conn.execute(
        update(memory_versions)
        .where(
            V.committed_at.is_(None),
            V.blob_released_at.is_(None),
            V.created_at < pending_before,
        )
        .values(blob_released_at=now)
    )
    rows = conn.execute(
        select(V.id, V.blob_key)
        .where(V.blob_released_at.is_not(None), V.blob_key.is_not(None))
        .order_by(V.blob_released_at, V.id)
        .limit(limit)
    ).all()
    return [(row.id, row.blob_key) for row in rows]


def forget_memory_blob(conn: Connection, version_id: str) -> None:
    store_gone = V.memory_store_id.not_in(select(memory_stores.c.id))
    conn.execute(
        delete(memory_versions).where(
            V.id == version_id,
            V.blob_released_at.is_not(None),
            or_(V.committed_at.is_(None), store_gone),
        )
    )
    conn.execute(
        update(memory_versions)
        .where(V.id == version_id, V.blob_released_at.is_not(None))
        .values(blob_key=None, blob_released_at=None)
    )
