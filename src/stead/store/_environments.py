"""Environments: sandbox configuration, unique by name within a workspace."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, bindparam, delete, exists, insert, select, update

from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store import _locks
from stead.store._compiled import compiled
from stead.store._paging import fetch_page
from stead.store.base import EnvironmentChange, EnvironmentRecord, Page, PageRequest
from stead.store.errors import Conflict, NotFound
from stead.store.tables import environments, sessions


def _record(row: Row[Any]) -> EnvironmentRecord:
    return EnvironmentRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        name=row.name,
        description=row.description,
        config=row.config,
        metadata=row.metadata,
        scope=row.scope,
        created_at=row.created_at,
        updated_at=row.updated_at,
        archived_at=row.archived_at,
    )


def _check_name_free(
    conn: Connection, workspace_id: str, name: str, except_id: str | None = None
) -> None:
    stmt = select(environments.c.id).where(
        environments.c.workspace_id == workspace_id, environments.c.name == name
    )
    row = conn.execute(stmt).first()
    if row is not None and row.id != except_id:
        raise Conflict(f"name: an environment named {name!r} already exists ({row.id})")


def create(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    name: str,
    description: str | None,
    config: Json,
    metadata: dict[str, str],
    scope: str | None,
) -> EnvironmentRecord:
    _check_name_free(conn, workspace_id, name)
    record = EnvironmentRecord(
        id=new_id("environment"),
        workspace_id=workspace_id,
        name=name,
        description=description,
        config=config,
        metadata=metadata,
        scope=scope,
        created_at=now,
        updated_at=now,
        archived_at=None,
    )
    conn.execute(
        insert(environments).values(
            id=record.id,
            workspace_id=workspace_id,
            name=name,
            description=description,
            config=config,
            metadata=metadata,
            scope=scope,
            created_at=now,
            updated_at=now,
        )
    )
    return record


def _get_statement() -> Any:
    return select(environments).where(
        environments.c.id == bindparam("env_id"),
        environments.c.workspace_id == bindparam("workspace_id"),
    )


def get(conn: Connection, workspace_id: str, env_id: str) -> EnvironmentRecord:
    values = {"env_id": env_id, "workspace_id": workspace_id}
    rows = compiled(conn, "environments.get", _get_statement).fetch(conn, values)
    if not rows:
        raise NotFound("environment", env_id)
    return _record(rows[0])


def update_(
    conn: Connection, now: datetime, workspace_id: str, env_id: str, change: EnvironmentChange
) -> EnvironmentRecord:
    current = get(conn, workspace_id, env_id)
    check_update(current)
    values = change(current)
    changed = {k: v for k, v in values.items() if getattr(current, k) != v}
    if not changed:
        return current
    if "name" in changed:
        _check_name_free(conn, workspace_id, changed["name"], except_id=env_id)
    conn.execute(
        update(environments).where(environments.c.id == env_id).values(**changed, updated_at=now)
    )
    return get(conn, workspace_id, env_id)


def check_update(current: EnvironmentRecord) -> None:
    if current.archived_at is not None:
        raise Conflict(
            f"environment {current.id} is archived and cannot be updated",
            code="environment_archived",
            status=400,
        )


def archive(conn: Connection, now: datetime, workspace_id: str, env_id: str) -> EnvironmentRecord:
    _locks.row(conn, environments, env_id)
    current = get(conn, workspace_id, env_id)
    if current.archived_at is None:
        conn.execute(
            update(environments).where(environments.c.id == env_id).values(archived_at=now)
        )
    return get(conn, workspace_id, env_id)


def delete_(conn: Connection, workspace_id: str, env_id: str) -> None:
    _locks.row(conn, environments, env_id)  # a session being created on it commits first
    get(conn, workspace_id, env_id)
    in_use = conn.execute(
        select(
            exists().where(sessions.c.environment_id == env_id, sessions.c.archived_at.is_(None))
        )
    ).scalar_one()
    if in_use:
        raise Conflict(
            f"environment {env_id} is used by sessions that are not archived; "
            "archive or delete those sessions first"
        )
    conn.execute(delete(environments).where(environments.c.id == env_id))


def list_(
    conn: Connection, workspace_id: str, page: PageRequest, include_archived: bool
) -> Page[EnvironmentRecord]:
    stmt = select(environments).where(environments.c.workspace_id == workspace_id)
    if not include_archived:
        stmt = stmt.where(environments.c.archived_at.is_(None))
    return fetch_page(conn, stmt, [environments.c.created_at, environments.c.id], page, _record)
