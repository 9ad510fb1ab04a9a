"""Files (see ``files.py``): metadata rows, one workspace each, with a pending ->
ready -> deleted lifecycle that keeps every blob named by a row."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)

from stead.store import _limits, _locks
from stead.store._paging import fetch_page
from stead.store.base import Page, PageRequest
from stead.store.errors import NotFound, StorageQuotaExceeded
from stead.store.files import FileRecord, FileScope, NewFile
from stead.store.limits import FILE_STORAGE_LIMIT
from stead.store.skills import SKILL_SCOPE
from stead.store.tables import files, workspaces


def _record(row: Row[Any]) -> FileRecord:
    scope = None if row.scope_type is None else FileScope(row.scope_type, row.scope_id)
    return FileRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        filename=row.filename,
        mime_type=row.mime_type,
        size_bytes=row.size_bytes,
        blob_key=row.blob_key,
        scope=scope,
        created_at=row.created_at,
        expires_at=row.expires_at,
        ready_at=row.ready_at,
        deleted_at=row.deleted_at,
        bytes_removed_at=row.bytes_removed_at,
    )


def _visible(workspace_id: str) -> list[ColumnElement[bool]]:
    # A skill version's zip is a file row too (``skills.py``), but it is the
    # Skills API's to show, never the Files API's.
    return [
        files.c.workspace_id == workspace_id,
        files.c.ready_at.is_not(None),
        files.c.deleted_at.is_(None),
        or_(files.c.scope_type.is_(None), files.c.scope_type != SKILL_SCOPE),
    ]


def begin_file(conn: Connection, now: datetime, new: NewFile, quota: int = 0) -> FileRecord:
    if new.scope is None or new.scope.type != SKILL_SCOPE:
        _check_quota(conn, now, new, quota)
    scope_type = None if new.scope is None else new.scope.type
    scope_id = None if new.scope is None else new.scope.id
    conn.execute(
        insert(files).values(
            id=new.id,
            workspace_id=new.workspace_id,
            filename=new.filename,
            mime_type=new.mime_type,
            size_bytes=new.size_bytes,
            blob_key=new.blob_key,
            scope_type=scope_type,
            scope_id=scope_id,
            created_at=now,
            expires_at=new.expires_at,
        )
    )
    return FileRecord(
        new.id,
        new.workspace_id,
        new.filename,
        new.mime_type,
        new.size_bytes,
        new.blob_key,
        new.scope,
        now,
        new.expires_at,
        None,
        None,
    )


def _check_quota(conn: Connection, now: datetime, new: NewFile, default: int) -> None:
    """Raises ``StorageQuotaExceeded`` if ``new`` does not fit in its workspace's
    quota (its ``file_storage_bytes`` limit, else ``default``; 0 there: none)."""

    def used() -> int:
        # Held until commit: a second upload of the workspace counts after this one.
        _locks.row(conn, workspaces, new.workspace_id)
        return stored_bytes(conn, now, new.workspace_id)

    refuse_storage(_limits.get(conn, new.workspace_id), default, used, new.size_bytes)


def refuse_storage(
    limits: dict[str, int], default: int, used: Callable[[], int], size: int
) -> None:
    """``StorageQuotaExceeded`` when ``size`` more bytes pass the workspace's
    quota: its ``file_storage_bytes`` limit among ``limits``, else ``default``
    (0 there: none); ``used`` reads what it holds, only when there is a quota."""
    quota = limits.get(FILE_STORAGE_LIMIT)
    if quota is None and default <= 0:
        return
    quota = default if quota is None else quota
    held = used()
    if held + size > quota:
        raise StorageQuotaExceeded(quota, held, size)


def stored_bytes(conn: Connection, now: datetime, workspace_id: str) -> int:
    """Bytes the workspace's files hold against its quota: pending and ready
    files, not deleted, not expired, skill versions aside."""
    total = conn.execute(
        select(func.coalesce(func.sum(files.c.size_bytes), 0)).where(
            files.c.workspace_id == workspace_id,
            files.c.deleted_at.is_(None),
            files.c.bytes_removed_at.is_(None),
            or_(files.c.expires_at.is_(None), files.c.expires_at > now),
            or_(files.c.scope_type.is_(None), files.c.scope_type != SKILL_SCOPE),
        )
    ).scalar_one()
    return int(total)


def mark_ready(conn: Connection, now: datetime, workspace_id: str, file_id: str) -> None:
    """Makes a pending file ready; ``NotFound`` if the purger tombstoned it."""
    # One conditional UPDATE: a purger's tombstone and this cannot both win.
    done = conn.execute(
        update(files)
        .where(
            files.c.id == file_id,
            files.c.workspace_id == workspace_id,
            files.c.ready_at.is_(None),
            files.c.deleted_at.is_(None),
        )
        .values(ready_at=now)
    )
    if done.rowcount != 1:
        raise NotFound("file", file_id)


def file_ready(conn: Connection, now: datetime, workspace_id: str, file_id: str) -> FileRecord:
    mark_ready(conn, now, workspace_id, file_id)
    return get_file(conn, workspace_id, file_id)


def tombstone(conn: Connection, now: datetime, file_ids: Sequence[str]) -> list[FileRecord]:
    """Tombstones ready files (of another aggregate, which decided they go) and
    returns them, for the caller to remove their blobs and then ``forget_file``."""
    if not file_ids:
        return []
    conn.execute(
        update(files)
        .where(files.c.id.in_(list(file_ids)), files.c.deleted_at.is_(None))
        .values(deleted_at=now)
    )
    rows = conn.execute(select(files).where(files.c.id.in_(list(file_ids)))).all()
    return [_record(row) for row in rows]


def abandon_file(conn: Connection, now: datetime, file_id: str) -> FileRecord | None:
    done = conn.execute(
        update(files)
        .where(files.c.id == file_id, files.c.ready_at.is_(None), files.c.deleted_at.is_(None))
        .values(deleted_at=now)
    )
    if done.rowcount != 1:
        return None
    row = conn.execute(select(files).where(files.c.id == file_id)).first()
    return None if row is None else _record(row)


def get_file(conn: Connection, workspace_id: str, file_id: str) -> FileRecord:
    row = conn.execute(select(files).where(files.c.id == file_id, *_visible(workspace_id))).first()
    if row is None:
        raise NotFound("file", file_id)
    return _record(row)


def list_files(
    conn: Connection, workspace_id: str, page: PageRequest, scope_id: str | None
) -> Page[FileRecord]:
    stmt = select(files).where(*_visible(workspace_id))
    if scope_id is not None:
        stmt = stmt.where(files.c.scope_id == scope_id)
    return fetch_page(conn, stmt, [files.c.created_at, files.c.id], page, _record)


def files_by_ids(conn: Connection, workspace_id: str, file_ids: Sequence[str]) -> list[FileRecord]:
    if not file_ids:
        return []
    rows = conn.execute(
        select(files)
        .where(files.c.id.in_(list(file_ids)), *_visible(workspace_id))
        .order_by(files.c.created_at.desc(), files.c.id.desc())
    ).all()
    return [_record(row) for row in rows]


def delete_file(conn: Connection, now: datetime, workspace_id: str, file_id: str) -> FileRecord:
    # Read, then decide: on PostgreSQL the row is held so two deletes cannot
    # both see it visible (the second is a 404, as on SQLite).
    _locks.row(conn, files, file_id)
    current = get_file(conn, workspace_id, file_id)
    conn.execute(update(files).where(files.c.id == file_id).values(deleted_at=now))
    return current


def anything_to_purge(conn: Connection, pending_before: datetime) -> bool:
    """Whether ``files_to_purge`` would find a tombstone or an abandoned upload."""
    found = conn.execute(
        select(files.c.id)
        .where(
            or_(
                files.c.deleted_at.is_not(None),
                and_(files.c.ready_at.is_(None), files.c.created_at < pending_before),
            )
        )
        .limit(1)
    ).first()
    return found is not None


def files_to_purge(
    conn: Connection, now: datetime, pending_before: datetime, limit: int
) -> list[FileRecord]:
    conn.execute(
        update(files)
        .where(
            files.c.ready_at.is_(None),
            files.c.deleted_at.is_(None),
            files.c.created_at < pending_before,
        )
        .values(deleted_at=now)
    )
    rows = conn.execute(
        select(files)
        .where(files.c.deleted_at.is_not(None))
        .order_by(files.c.deleted_at, files.c.id)
        .limit(limit)
    ).all()
    return [_record(row) for row in rows]


def expired_files(conn: Connection, now: datetime, limit: int) -> list[FileRecord]:
    rows = conn.execute(
        select(files)
        .where(
            files.c.expires_at <= now,
            files.c.bytes_removed_at.is_(None),
            files.c.ready_at.is_not(None),
            files.c.deleted_at.is_(None),
        )
        .order_by(files.c.expires_at, files.c.id)
        .limit(limit)
    ).all()
    return [_record(row) for row in rows]


def bytes_removed(conn: Connection, now: datetime, file_id: str) -> None:
    conn.execute(
        update(files)
        .where(files.c.id == file_id, files.c.bytes_removed_at.is_(None))
        .values(bytes_removed_at=now)
    )


def forget_file(conn: Connection, file_id: str) -> None:
    conn.execute(delete(files).where(files.c.id == file_id, files.c.deleted_at.is_not(None)))
