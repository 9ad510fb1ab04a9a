"""Session resources (in the session's row) and the outputs ledger (see ``resources.py``)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, insert, select, update

from stead.jsonvalues import Json
from stead.store import _files, _locks, _repositories, _sessions
from stead.store._files import _record as file_record
from stead.store.errors import Conflict, NotFound
from stead.store.files import FileRecord, NewFile
from stead.store.sessions import SessionRecord
from stead.store.tables import files, session_outputs, sessions


def add(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    session_id: str,
    resource: Json,
    limit: int,
    sealed_token: bytes | None,
) -> Json:
    _locks.session(conn, session_id)
    current = _sessions.get(conn, workspace_id, session_id)
    _sessions.check_resources_open(current)
    if resource["type"] == "file":
        try:  # checked in the transaction that stores it: a file deleted meanwhile is a 404
            _files.get_file(conn, workspace_id, resource["file_id"])
        except NotFound:
            raise NotFound("file", resource["file_id"], field="file_id") from None
    _write(conn, now, session_id, [*with_room(current, resource, limit), resource])
    if resource["type"] == _repositories.REPOSITORY:
        _repositories.insert_for_session(
            conn, now, workspace_id, session_id, {resource["id"]: sealed_token}
        )
    return resource


def without(current: SessionRecord, ident: str) -> tuple[Json, list[Json]]:
    """The resource ``ident`` and the session's others; ``NotFound`` if it has
    none, ``Conflict`` if its resources cannot change."""
    _sessions.check_resources_open(current)
    found = next((r for r in current.resources if r.get("id") == ident), None)
    if found is None:
        raise NotFound("session resource", ident)
    return found, [r for r in current.resources if r.get("id") != ident]


def with_room(current: SessionRecord, resource: Json, limit: int) -> list[Json]:
    """The session's resources, when ``resource`` may join them: fewer than
    ``limit``, and no mount path inside another's."""
    held = list(current.resources)
    if len(held) >= limit:
        raise Conflict(f"session {current.id} already has {limit} resources", status=400)
    path = resource["mount_path"]
    for other in held:
        mounted = str(other.get("mount_path", ""))
        if path == mounted or path.startswith(mounted + "/") or mounted.startswith(path + "/"):
            raise Conflict(f"mount_path: {path!r} is already used by {other['id']}", status=400)
    return held


def delete(conn: Connection, now: datetime, workspace_id: str, session_id: str, ident: str) -> Json:
    _locks.session(conn, session_id)
    found, rest = without(_sessions.get(conn, workspace_id, session_id), ident)
    _write(conn, now, session_id, rest)
    _repositories.delete_one(conn, ident)
    return found


def _write(conn: Connection, now: datetime, session_id: str, resources: list[Json]) -> None:
    conn.execute(
        update(sessions)
        .where(sessions.c.id == session_id)
        .values(resources=resources, updated_at=now)
    )


def begin_output(
    conn: Connection,
    now: datetime,
    new: NewFile,
    session_id: str,
    path: str,
    sha256: str,
    quota: int = 0,
) -> FileRecord | None:
    key = (
        session_outputs.c.session_id == session_id,
        session_outputs.c.path == path,
        session_outputs.c.sha256 == sha256,
    )
    _locks.session(conn, session_id)
    earlier = conn.execute(select(session_outputs.c.file_id).where(*key)).scalar_one_or_none()
    if earlier is None:
        record = _files.begin_file(conn, now, new, quota)
        conn.execute(
            insert(session_outputs).values(
                session_id=session_id,
                path=path,
                sha256=sha256,
                file_id=new.id,
                workspace_id=new.workspace_id,
                created_at=now,
            )
        )
        return record
    row = conn.execute(select(files).where(files.c.id == earlier)).first()
    if row is None or row.deleted_at is not None:
        return None
    return file_record(row)
