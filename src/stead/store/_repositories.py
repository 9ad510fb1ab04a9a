"""Repository resources' private side (see ``resources.py``): sealed tokens and
clone state, one ``session_repositories`` row per ``github_repository`` resource."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from sqlalchemy import Connection, delete, insert, select, update

from stead.jsonvalues import Json
from stead.store import _kept_key, _locks, _sessions
from stead.store.errors import Conflict, NotFound
from stead.store.resources import RepositoryState
from stead.store.sessions import SessionRecord
from stead.store.tables import session_repositories, sessions

REPOSITORY = "github_repository"


def insert_for_session(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    session_id: str,
    tokens: Mapping[str, bytes | None],
) -> None:
    """A row for each repository resource of a new session (its sealed token, if any)."""
    if tokens:
        _kept_key.check(conn, *tokens.values())
        conn.execute(
            insert(session_repositories),
            [
                {
                    "resource_id": resource_id,
                    "session_id": session_id,
                    "workspace_id": workspace_id,
                    "sealed_token": sealed,
                    "cloned_at": None,
                    "updated_at": now,
                }
                for resource_id, sealed in tokens.items()
            ],
        )


def delete_for_session(conn: Connection, session_id: str) -> None:
    conn.execute(
        delete(session_repositories).where(session_repositories.c.session_id == session_id)
    )


def delete_one(conn: Connection, resource_id: str) -> None:
    conn.execute(
        delete(session_repositories).where(session_repositories.c.resource_id == resource_id)
    )


def states(conn: Connection, session_id: str) -> list[RepositoryState]:
    rows = conn.execute(
        select(session_repositories)
        .where(session_repositories.c.session_id == session_id)
        .order_by(session_repositories.c.resource_id)
    )
    return [
        RepositoryState(
            resource_id=row.resource_id,
            sealed_token=bytes(row.sealed_token) if row.sealed_token is not None else None,
            cloned_at=row.cloned_at,
        )
        for row in rows
    ]


def set_token(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    session_id: str,
    resource_id: str,
    sealed: bytes,
    stamp: str,
) -> Json:
    _locks.session(conn, session_id)
    changed, held = with_token(_sessions.get(conn, workspace_id, session_id), resource_id, stamp)
    _kept_key.check(conn, sealed)
    conn.execute(
        update(sessions).where(sessions.c.id == session_id).values(resources=held, updated_at=now)
    )
    conn.execute(
        update(session_repositories)
        .where(session_repositories.c.resource_id == resource_id)
        .values(sealed_token=sealed, updated_at=now)
    )
    return changed


def with_token(current: SessionRecord, resource_id: str, stamp: str) -> tuple[Json, list[Json]]:
    """The repository resource ``resource_id`` with its token replaced at ``stamp``,
    and the session's resources with it: ``NotFound``, or ``Conflict`` (400,
    naming ``authorization_token``) for a resource of another type, or when the
    session's resources cannot change."""
    _sessions.check_resources_open(current)
    found = next((r for r in current.resources if r.get("id") == resource_id), None)
    if found is None:
        raise NotFound("session resource", resource_id)
    if found.get("type") != REPOSITORY:
        raise Conflict(
            f"authorization_token: {resource_id} is a {found.get('type')} resource; "
            f"only {REPOSITORY} resources take a token",
            status=400,
        )
    changed = {**found, "updated_at": stamp}
    return changed, [changed if r.get("id") == resource_id else r for r in current.resources]


def mark_cloned(conn: Connection, now: datetime, resource_id: str) -> None:
    conn.execute(
        update(session_repositories)
        .where(session_repositories.c.resource_id == resource_id)
        .values(cloned_at=now)
    )


def reseal(conn: Connection, now: datetime, resealed: Callable[[str, bytes], bytes | None]) -> int:
    count = 0
    rows = conn.execute(
        select(session_repositories.c.resource_id, session_repositories.c.sealed_token).where(
            session_repositories.c.sealed_token.is_not(None)
        )
    ).all()
    kept = _kept_key.kept(conn)
    for row in rows:
        sealed = resealed(row.resource_id, bytes(row.sealed_token))
        if sealed is not None:
            _kept_key.refuse_others(kept, [sealed])
            conn.execute(
                update(session_repositories)
                .where(session_repositories.c.resource_id == row.resource_id)
                .values(sealed_token=sealed, updated_at=now)
            )
            count += 1
    return count
