"""Agents and their immutable versions, and environments, in memory
(``_agents.py`` and ``_environments.py``'s rules)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store import _agents, _environments
from stead.store._sessions import changed
from stead.store.agents import AgentChange, AgentRecord
from stead.store.environments import EnvironmentChange, EnvironmentRecord
from stead.store.errors import Conflict, NotFound
from stead.store.inmemory.tables import (
    AgentRow,
    EnvironmentRow,
    Tables,
    VersionRow,
    agent_record,
    page_of,
    stored,
)
from stead.store.paging import Page, PageRequest


def create_agent(t: Tables, now: datetime, workspace_id: str, definition: Json) -> AgentRecord:
    row = AgentRow(new_id("agent"), workspace_id, 1, now, now, None)
    t.agent_versions[(row.id, 1)] = VersionRow(stored(definition), now)
    t.agents[row.id] = row
    return agent_record(t, row, 1)


def _agent(t: Tables, workspace_id: str, agent_id: str) -> AgentRow:
    row = t.agents.get(agent_id)
    if row is None or row.workspace_id != workspace_id:
        raise NotFound("agent", agent_id)
    return row


def get_agent(t: Tables, workspace_id: str, agent_id: str, version: int | None) -> AgentRecord:
    row = _agent(t, workspace_id, agent_id)
    wanted = row.latest_version if version is None else version
    if (agent_id, wanted) not in t.agent_versions:
        raise NotFound("version", str(version), field="version")
    return agent_record(t, row, wanted)


def update_agent(
    t: Tables,
    now: datetime,
    workspace_id: str,
    agent_id: str,
    expected_version: int | None,
    change: AgentChange,
) -> AgentRecord:
    current = get_agent(t, workspace_id, agent_id, None)
    _agents.check_update(current, expected_version)
    definition = change(current.definition)
    if definition == current.definition:
        return current
    version = current.version + 1
    t.agent_versions[(agent_id, version)] = VersionRow(stored(definition), now)
    row = replace(t.agents[agent_id], latest_version=version, updated_at=now)
    t.agents[agent_id] = row
    return agent_record(t, row, version)


def archive_agent(t: Tables, now: datetime, workspace_id: str, agent_id: str) -> AgentRecord:
    row = _agent(t, workspace_id, agent_id)
    if row.archived_at is None:
        row = t.agents[agent_id] = replace(row, archived_at=now)
    return agent_record(t, row, row.latest_version)


def list_agents(
    t: Tables,
    workspace_id: str,
    page: PageRequest,
    include_archived: bool,
    created_gte: datetime | None,
    created_lte: datetime | None,
) -> Page[AgentRecord]:
    rows = [
        row
        for row in t.agents.values()
        if row.workspace_id == workspace_id
        and (include_archived or row.archived_at is None)
        and (created_gte is None or row.created_at >= created_gte)
        and (created_lte is None or row.created_at <= created_lte)
    ]
    found = page_of(rows, lambda r: (r.created_at, r.id), page)
    items = [agent_record(t, row, row.latest_version) for row in found.items]
    return Page(items, found.has_next, found.has_prev)


def list_agent_versions(
    t: Tables, workspace_id: str, agent_id: str, page: PageRequest
) -> Page[AgentRecord]:
    row = _agent(t, workspace_id, agent_id)
    versions = [v for (a, v) in t.agent_versions if a == agent_id]
    found = page_of(versions, lambda v: (v,), page)
    return Page([agent_record(t, row, v) for v in found.items], found.has_next, found.has_prev)


def _check_name_free(t: Tables, workspace_id: str, name: str, except_id: str | None) -> None:
    for row in t.environments.values():
        if row.workspace_id == workspace_id and row.name == name and row.id != except_id:
            raise Conflict(f"name: an environment named {name!r} already exists ({row.id})")


def create_environment(
    t: Tables,
    now: datetime,
    workspace_id: str,
    name: str,
    description: str | None,
    config: Json,
    metadata: dict[str, str],
    scope: str | None,
) -> EnvironmentRecord:
    _check_name_free(t, workspace_id, name, None)
    row = EnvironmentRow(
        new_id("environment"),
        workspace_id,
        name,
        description,
        stored(config),
        stored(metadata),
        scope,
        now,
        now,
        None,
    )
    t.environments[row.id] = row
    return row.record()


def environment_row(t: Tables, workspace_id: str, env_id: str) -> EnvironmentRow:
    row = t.environments.get(env_id)
    if row is None or row.workspace_id != workspace_id:
        raise NotFound("environment", env_id)
    return row


def get_environment(t: Tables, workspace_id: str, env_id: str) -> EnvironmentRecord:
    return environment_row(t, workspace_id, env_id).record()


def update_environment(
    t: Tables, now: datetime, workspace_id: str, env_id: str, change: EnvironmentChange
) -> EnvironmentRecord:
    current = get_environment(t, workspace_id, env_id)
    _environments.check_update(current)
    values = changed(current, change(current))
    if not values:
        return current
    if "name" in values:
        _check_name_free(t, workspace_id, values["name"], env_id)
    texts: dict[str, Any] = {
        k: stored(v) if k in ("config", "metadata") else v for k, v in values.items()
    }
    row = replace(t.environments[env_id], **texts, updated_at=now)
    t.environments[env_id] = row
    return row.record()


def archive_environment(
    t: Tables, now: datetime, workspace_id: str, env_id: str
) -> EnvironmentRecord:
    row = environment_row(t, workspace_id, env_id)
    if row.archived_at is None:
        row = t.environments[env_id] = replace(row, archived_at=now)
    return row.record()


def delete_environment(t: Tables, workspace_id: str, env_id: str) -> None:
    environment_row(t, workspace_id, env_id)
    if any(s.environment_id == env_id and s.archived_at is None for s in t.sessions.values()):
        raise Conflict(
            f"environment {env_id} is used by sessions that are not archived; "
            "archive or delete those sessions first"
        )
    del t.environments[env_id]


def list_environments(
    t: Tables, workspace_id: str, page: PageRequest, include_archived: bool
) -> Page[EnvironmentRecord]:
    rows = [
        row
        for row in t.environments.values()
        if row.workspace_id == workspace_id and (include_archived or row.archived_at is None)
    ]
    found = page_of(rows, lambda r: (r.created_at, r.id), page)
    return Page([row.record() for row in found.items], found.has_next, found.has_prev)
