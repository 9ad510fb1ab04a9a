"""Memory stores attached to sessions, and the bases of their mounted files
(see ``memories.py``): ``session_memory_stores`` and ``memory_mounts``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial

from sqlalchemy import ColumnElement, Connection, Select, and_, delete, insert, select

from stead.jsonvalues import Json
from stead.store import _locks
from stead.store._memory_stores import get_memory_store
from stead.store.errors import Conflict, NotFound
from stead.store.memories import MOUNT_MOVED, MemoryStoreRecord, MountBase, MountClaim
from stead.store.tables import memory_mounts, memory_stores, session_memory_stores

M = memory_mounts.c


def attach(conn: Connection, workspace_id: str, session_id: str, resources: Sequence[Json]) -> None:
    """Records the session's ``memory_store`` resources once each store is a
    live store of the workspace, held until commit so an archive waits for it."""
    for store_id, field in attached(resources):
        _locks.row(conn, memory_stores, store_id, shared=True)
        usable(field, partial(get_memory_store, conn, workspace_id, store_id))
        conn.execute(
            insert(session_memory_stores).values(
                session_id=session_id, memory_store_id=store_id, workspace_id=workspace_id
            )
        )


def attached(resources: Sequence[Json]) -> list[tuple[str, str]]:
    """(store id, field) of each ``memory_store`` resource among ``resources``."""
    return [
        (str(r["memory_store_id"]), f"resources.{i}.memory_store_id")
        for i, r in enumerate(resources)
        if r.get("type") == "memory_store"
    ]


def usable(field: str, get: Callable[[], MemoryStoreRecord]) -> MemoryStoreRecord:
    """The store ``get`` finds, unless a new session may not use it (named by ``field``)."""
    try:
        store = get()
    except NotFound as exc:
        raise NotFound(exc.kind, exc.ident, field=field) from None
    if store.archived_at is not None:
        raise Conflict(
            f"{field}: memory store {store.id} is archived; new sessions cannot use it",
            code="memory_store_archived",
            status=400,
        )
    return store


def sessions_of(workspace_id: str, store_id: str) -> Select[tuple[str]]:
    """The ids of the sessions that have ``store_id`` as a resource (a subquery)."""
    S = session_memory_stores.c
    return select(S.session_id).where(S.workspace_id == workspace_id, S.memory_store_id == store_id)


def forget_session(conn: Connection, session_id: str) -> None:
    for table in (session_memory_stores, memory_mounts):
        conn.execute(delete(table).where(table.c.session_id == session_id))


def _key(session_id: str, store_id: str, path: str) -> ColumnElement[bool]:
    return and_(M.session_id == session_id, M.memory_store_id == store_id, M.path == path)


def move(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    store_id: str,
    claim: MountClaim,
    memory_id: str,
    sha256: str | None,
) -> None:
    """Moves the claimed file's base to (``memory_id``, ``sha256``), or drops it
    (``sha256`` None), if it is still what the claim expects; else ``Conflict``
    ``MOUNT_MOVED`` and the caller's transaction is rolled back."""
    _locks.session(conn, claim.session_id)
    key = _key(claim.session_id, store_id, claim.path)
    check_base(claim, conn.execute(select(M.sha256).where(key)).scalar())
    conn.execute(delete(memory_mounts).where(key))
    if sha256 is not None:
        base = MountBase(store_id, claim.path, memory_id, sha256)
        _insert(conn, now, workspace_id, claim.session_id, [base])


def check_base(claim: MountClaim, found: str | None) -> None:
    """Refuses the claimed write-back when the file's base is ``found``, not what
    the claim expects: another write-back of it committed."""
    if found != claim.expected:
        raise Conflict(
            f"the base of {claim.path} in session {claim.session_id} moved on", code=MOUNT_MOVED
        )


def _insert(
    conn: Connection, now: datetime, workspace_id: str, session_id: str, bases: list[MountBase]
) -> None:
    conn.execute(
        insert(memory_mounts),
        [
            {
                "session_id": session_id,
                "memory_store_id": b.memory_store_id,
                "path": b.path,
                "memory_id": b.memory_id,
                "sha256": b.sha256,
                "workspace_id": workspace_id,
                "updated_at": now,
            }
            for b in bases
        ],
    )


def bases(conn: Connection, session_id: str, store_id: str) -> list[MountBase]:
    rows = conn.execute(
        select(M.path, M.memory_id, M.sha256)
        .where(M.session_id == session_id, M.memory_store_id == store_id)
        .order_by(M.path)
    ).all()
    return [MountBase(store_id, row.path, row.memory_id, row.sha256) for row in rows]


def put_bases(
    conn: Connection, now: datetime, workspace_id: str, session_id: str, given: list[MountBase]
) -> None:
    _locks.session(conn, session_id)
    for base in given:
        conn.execute(delete(memory_mounts).where(_key(session_id, base.memory_store_id, base.path)))
    if given:
        _insert(conn, now, workspace_id, session_id, given)


def drop_bases(
    conn: Connection, now: datetime, session_id: str, store_id: str, paths: list[str]
) -> None:
    _locks.session(conn, session_id)
    for path in paths:
        conn.execute(delete(memory_mounts).where(_key(session_id, store_id, path)))
