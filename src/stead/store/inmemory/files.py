"""Files, session resources and captured outputs in memory (``_files.py`` and
``_resources.py``'s rules): a file is pending, then ready (visible), then a
tombstone until its blob is gone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from stead.jsonvalues import Json
from stead.store._files import refuse_storage
from stead.store._repositories import REPOSITORY
from stead.store._resources import with_room, without
from stead.store._sessions import check_resources_open
from stead.store.errors import NotFound
from stead.store.files import FileRecord, NewFile
from stead.store.inmemory import limits, repositories, sessions
from stead.store.inmemory.tables import Tables, page_of, stored
from stead.store.paging import Page, PageRequest
from stead.store.skills import SKILL_SCOPE


def _visible(record: FileRecord, workspace_id: str) -> bool:
    # A skill version's zip is the Skills API's to show, never the Files API's.
    return (
        record.workspace_id == workspace_id
        and record.ready_at is not None
        and record.deleted_at is None
        and (record.scope is None or record.scope.type != SKILL_SCOPE)
    )


def begin_file(t: Tables, now: datetime, new: NewFile, quota: int = 0) -> FileRecord:
    if new.scope is None or new.scope.type != SKILL_SCOPE:
        _check_quota(t, now, new, quota)
    record = FileRecord(
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
    t.files[new.id] = record
    return record


def _check_quota(t: Tables, now: datetime, new: NewFile, default: int) -> None:
    def used() -> int:
        return sum(
            f.size_bytes
            for f in t.files.values()
            if f.workspace_id == new.workspace_id
            and f.deleted_at is None
            and f.bytes_removed_at is None
            and (f.expires_at is None or f.expires_at > now)
            and (f.scope is None or f.scope.type != SKILL_SCOPE)
        )

    refuse_storage(limits.get(t, new.workspace_id), default, used, new.size_bytes)


def mark_ready(t: Tables, now: datetime, workspace_id: str, file_id: str) -> None:
    """Makes a pending file ready; ``NotFound`` if the purger tombstoned it."""
    found = t.files.get(file_id)
    if (
        found is None
        or found.workspace_id != workspace_id
        or found.ready_at is not None
        or found.deleted_at is not None
    ):
        raise NotFound("file", file_id)
    t.files[file_id] = replace(found, ready_at=now)


def file_ready(t: Tables, now: datetime, workspace_id: str, file_id: str) -> FileRecord:
    mark_ready(t, now, workspace_id, file_id)
    return get_file(t, workspace_id, file_id)


def abandon_file(t: Tables, now: datetime, file_id: str) -> FileRecord | None:
    """``_files.abandon_file``: a pending file tombstoned, or None."""
    found = t.files.get(file_id)
    if found is None or found.ready_at is not None or found.deleted_at is not None:
        return None
    found = t.files[file_id] = replace(found, deleted_at=now)
    return found


def tombstone(t: Tables, now: datetime, file_ids: Sequence[str]) -> list[FileRecord]:
    """``_files.tombstone``: the files (of an aggregate that decided they go)
    tombstoned, for the caller to remove their blobs and then forget them."""
    gone = []
    for file_id in dict.fromkeys(file_ids):
        found = t.files.get(file_id)
        if found is None:
            continue
        if found.deleted_at is None:
            found = t.files[file_id] = replace(found, deleted_at=now)
        gone.append(found)
    return gone


def get_file(t: Tables, workspace_id: str, file_id: str) -> FileRecord:
    found = t.files.get(file_id)
    if found is None or not _visible(found, workspace_id):
        raise NotFound("file", file_id)
    return found


def list_files(
    t: Tables, workspace_id: str, page: PageRequest, scope_id: str | None
) -> Page[FileRecord]:
    rows = [
        f
        for f in t.files.values()
        if _visible(f, workspace_id) and (scope_id is None or (f.scope and f.scope.id == scope_id))
    ]
    return page_of(rows, lambda f: (f.created_at, f.id), page)


def files_by_ids(t: Tables, workspace_id: str, file_ids: Sequence[str]) -> list[FileRecord]:
    found = [t.files[i] for i in set(file_ids) if i in t.files]
    visible = [f for f in found if _visible(f, workspace_id)]
    return sorted(visible, key=lambda f: (f.created_at, f.id), reverse=True)


def delete_file(t: Tables, now: datetime, workspace_id: str, file_id: str) -> FileRecord:
    current = get_file(t, workspace_id, file_id)
    t.files[file_id] = replace(current, deleted_at=now)
    return current


def files_to_purge(
    t: Tables, now: datetime, pending_before: datetime, limit: int
) -> list[FileRecord]:
    for file_id, f in list(t.files.items()):
        if f.ready_at is None and f.deleted_at is None and f.created_at < pending_before:
            t.files[file_id] = replace(f, deleted_at=now)
    tombstones = [f for f in t.files.values() if f.deleted_at is not None]
    return sorted(tombstones, key=lambda f: (f.deleted_at, f.id))[:limit]


def expired_files(t: Tables, now: datetime, limit: int) -> list[FileRecord]:
    expired = [
        f
        for f in t.files.values()
        if f.expires_at is not None
        and f.expires_at <= now
        and f.bytes_removed_at is None
        and f.ready_at is not None
        and f.deleted_at is None
    ]
    return sorted(expired, key=lambda f: (f.expires_at, f.id))[:limit]


def bytes_removed(t: Tables, now: datetime, file_id: str) -> None:
    found = t.files.get(file_id)
    if found is not None and found.bytes_removed_at is None:
        t.files[file_id] = replace(found, bytes_removed_at=now)


def forget_file(t: Tables, _now: datetime, file_id: str) -> None:
    found = t.files.get(file_id)
    if found is not None and found.deleted_at is not None:
        del t.files[file_id]


def add_resource(
    t: Tables,
    now: datetime,
    workspace_id: str,
    session_id: str,
    resource: Json,
    limit: int,
    sealed_token: bytes | None = None,
) -> Json:
    current = sessions.get(t, workspace_id, session_id)
    check_resources_open(current)
    if resource["type"] == "file":
        try:
            get_file(t, workspace_id, resource["file_id"])
        except NotFound:
            raise NotFound("file", resource["file_id"], field="file_id") from None
    _set_resources(t, now, session_id, [*with_room(current, resource, limit), resource])
    if resource["type"] == REPOSITORY:
        tokens = {resource["id"]: sealed_token}
        repositories.insert_for_session(t, now, workspace_id, session_id, tokens)
    return resource


def delete_resource(
    t: Tables, now: datetime, workspace_id: str, session_id: str, ident: str
) -> Json:
    found, rest = without(sessions.get(t, workspace_id, session_id), ident)
    _set_resources(t, now, session_id, rest)
    t.repositories.pop(ident, None)
    return found


def _set_resources(t: Tables, now: datetime, session_id: str, resources: list[Json]) -> None:
    row = t.sessions[session_id]
    t.sessions[session_id] = replace(row, resources=stored(resources), updated_at=now)


def begin_output(
    t: Tables,
    now: datetime,
    new: NewFile,
    session_id: str,
    path: str,
    sha256: str,
    quota: int = 0,
) -> FileRecord | None:
    earlier = t.outputs.get((session_id, path, sha256))
    if earlier is None:
        record = begin_file(t, now, new, quota)
        t.outputs[(session_id, path, sha256)] = new.id
        return record
    found = t.files.get(earlier)
    return None if found is None or found.deleted_at is not None else found
