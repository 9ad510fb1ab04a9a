"""Agents and their immutable versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, bindparam, insert, select, update

from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store import _locks
from stead.store._compiled import compiled
from stead.store._paging import fetch_page
from stead.store.base import AgentChange, AgentRecord, Page, PageRequest
from stead.store.errors import Conflict, NotFound
from stead.store.tables import agent_versions, agents

_JOINED = select(
    agents.c.id,
    agents.c.workspace_id,
    agents.c.created_at,
    agents.c.archived_at,
    agent_versions.c.version,
    agent_versions.c.definition,
    agent_versions.c.created_at.label("version_created_at"),
).join(agent_versions, agent_versions.c.agent_id == agents.c.id)


def _record(row: Row[Any, Any, Any, Any, Any, Any, Any]) -> AgentRecord:
    return AgentRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        version=row.version,
        definition=row.definition,
        created_at=row.created_at,
        updated_at=row.version_created_at,
        archived_at=row.archived_at,
    )


def create(conn: Connection, now: datetime, workspace_id: str, definition: Json) -> AgentRecord:
    agent_id = new_id("agent")
    compiled(conn, "agents.insert", lambda: insert(agents)).execute_many(
        conn,
        [
            {
                "id": agent_id,
                "workspace_id": workspace_id,
                "latest_version": 1,
                "created_at": now,
                "updated_at": now,
                "archived_at": None,
            }
        ],
    )
    compiled(conn, "agent_versions.insert", lambda: insert(agent_versions)).execute_many(
        conn, [{"agent_id": agent_id, "version": 1, "definition": definition, "created_at": now}]
    )
    return AgentRecord(agent_id, workspace_id, 1, definition, now, now, None)


def _get_statement(latest: bool) -> Any:
    version = agents.c.latest_version if latest else bindparam("version")
    return _JOINED.where(
        agents.c.id == bindparam("agent_id"),
        agents.c.workspace_id == bindparam("workspace_id"),
        agent_versions.c.version == version,
    )


def get(
    conn: Connection, workspace_id: str, agent_id: str, version: int | None = None
) -> AgentRecord:
    values: dict[str, Any] = {"agent_id": agent_id, "workspace_id": workspace_id}
    if version is not None:
        values["version"] = version
    latest = version is None
    name = "agents.get_latest" if latest else "agents.get_version"
    rows = compiled(conn, name, lambda: _get_statement(latest)).fetch(conn, values)
    row = rows[0] if rows else None
    if row is None:
        if version is not None and _exists(conn, workspace_id, agent_id):
            raise NotFound("version", str(version), field="version")
        raise NotFound("agent", agent_id)
    return _record(row)


def _exists(conn: Connection, workspace_id: str, agent_id: str) -> bool:
    stmt = select(agents.c.id).where(agents.c.id == agent_id, agents.c.workspace_id == workspace_id)
    return conn.execute(stmt).first() is not None


def update_(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    agent_id: str,
    expected_version: int | None,
    change: AgentChange,
) -> AgentRecord:
    _locks.row(conn, agents, agent_id)  # two updates make two versions, one after the other
    current = get(conn, workspace_id, agent_id)
    check_update(current, expected_version)
    definition = change(current.definition)
    if definition == current.definition:
        return current
    version = current.version + 1
    conn.execute(
        insert(agent_versions).values(
            agent_id=agent_id, version=version, definition=definition, created_at=now
        )
    )
    conn.execute(
        update(agents).where(agents.c.id == agent_id).values(latest_version=version, updated_at=now)
    )
    return AgentRecord(agent_id, workspace_id, version, definition, current.created_at, now, None)


def check_update(current: AgentRecord, expected_version: int | None) -> None:
    """Raises unless ``current``, the latest version, may take a change."""
    if current.archived_at is not None:
        raise Conflict(f"agent {current.id} is archived and cannot be updated", status=400)
    if expected_version is not None and expected_version != current.version:
        raise Conflict(
            f"version: agent {current.id} is at version {current.version}, "
            f"not {expected_version}; retrieve it and apply the change again"
        )


def archive(conn: Connection, now: datetime, workspace_id: str, agent_id: str) -> AgentRecord:
    _locks.row(conn, agents, agent_id)
    current = get(conn, workspace_id, agent_id)
    if current.archived_at is not None:
        return current
    conn.execute(update(agents).where(agents.c.id == agent_id).values(archived_at=now))
    return get(conn, workspace_id, agent_id)


def list_(
    conn: Connection,
    workspace_id: str,
    page: PageRequest,
    include_archived: bool,
    created_gte: datetime | None,
    created_lte: datetime | None,
) -> Page[AgentRecord]:
    stmt = _JOINED.where(
        agents.c.workspace_id == workspace_id,
        agent_versions.c.version == agents.c.latest_version,
    )
    if not include_archived:
        stmt = stmt.where(agents.c.archived_at.is_(None))
    if created_gte is not None:
        stmt = stmt.where(agents.c.created_at >= created_gte)
    if created_lte is not None:
        stmt = stmt.where(agents.c.created_at <= created_lte)
    return fetch_page(conn, stmt, [agents.c.created_at, agents.c.id], page, _record)


def list_versions(
    conn: Connection, workspace_id: str, agent_id: str, page: PageRequest
) -> Page[AgentRecord]:
    if not _exists(conn, workspace_id, agent_id):
        raise NotFound("agent", agent_id)
    stmt = _JOINED.where(agents.c.id == agent_id)
    return fetch_page(conn, stmt, [agent_versions.c.version], page, _record)
