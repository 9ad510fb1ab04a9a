"""Sessions in memory (``_sessions.py``'s rules). Status is derived from
``terminated_at`` and the session's runs on every read, never stored."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from stead.events import EventType
from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store._sessions import (
    budget_frees,
    changed,
    check_agent_change,
    check_writable,
    resolved,
    usable_agent,
    usable_environment,
)
from stead.store.agents import AgentRecord
from stead.store.errors import Conflict, NotFound
from stead.store.events import EventRecord, NewEvent
from stead.store.inmemory import (
    agents,
    events,
    leases,
    memory_mounts,
    repositories,
    runs,
    vaults,
    work,
)
from stead.store.inmemory.tables import SessionRow, Tables, loaded, page_of, stored
from stead.store.paging import Page, PageRequest
from stead.store.runs import LIVE_RUN_STATUSES, RunStatus
from stead.store.sessions import SessionChange, SessionFilter, SessionRecord

JSON_COLUMNS = ("agent", "metadata", "vault_ids", "budget", "resources", "usage")


def status(t: Tables, row: SessionRow) -> str:
    if row.terminated_at is not None:
        return "terminated"
    held = {run.status for run in t.runs.values() if run.session_id == row.id}
    if held & set(LIVE_RUN_STATUSES):
        return "running"
    return "rescheduling" if RunStatus.RETRYING in held else "idle"


def record(t: Tables, row: SessionRow) -> SessionRecord:
    return row.record(status(t, row))


def get(t: Tables, workspace_id: str, session_id: str) -> SessionRecord:
    row = t.sessions.get(session_id)
    if row is None or row.workspace_id != workspace_id:
        raise NotFound("session", session_id)
    return record(t, row)


def snapshot(t: Tables, session_id: str) -> SessionRecord:
    row = t.sessions.get(session_id)
    if row is None:
        raise NotFound("session", session_id)
    return record(t, row)


def create(
    t: Tables,
    now: datetime,
    workspace_id: str,
    agent_ref: tuple[str, int | None],
    build_agent: Callable[[AgentRecord], Json],
    environment_id: str,
    fields: dict[str, Any],
    initial_events: Sequence[NewEvent],
) -> tuple[SessionRecord, list[EventRecord]]:
    agent_id, version = agent_ref
    agent = usable_agent(
        resolved("agent", lambda: agents.get_agent(t, workspace_id, agent_id, version))
    )
    usable_environment(
        resolved("environment_id", lambda: agents.get_environment(t, workspace_id, environment_id))
    )
    vaults.check_attachable(t, workspace_id, fields.get("vault_ids", []))
    row = SessionRow(
        id=new_id("session"),
        workspace_id=workspace_id,
        agent_id=agent.id,
        agent_version=agent.version,
        agent=stored(build_agent(agent)),
        environment_id=environment_id,
        title=fields.get("title"),
        metadata=stored(fields.get("metadata", {})),
        vault_ids=stored(fields.get("vault_ids", [])),
        budget=stored(fields.get("budget")),
        resources=stored(fields.get("resources", [])),
        usage=stored({}),
        created_at=now,
        updated_at=now,
        archived_at=None,
        terminated_at=None,
    )
    t.sessions[row.id] = row
    tokens = fields.get("repository_tokens", {})
    repositories.insert_for_session(t, now, workspace_id, row.id, tokens)
    memory_mounts.attach(t, workspace_id, row.id, fields.get("resources", []))
    logged = events.append_log(t, now, row.id, initial_events)
    if any(e.type == EventType.USER_MESSAGE for e in initial_events):
        runs.start(t, now, row.id)
    return record(t, row), logged


def update(
    t: Tables,
    now: datetime,
    workspace_id: str,
    session_id: str,
    change: SessionChange,
    event: NewEvent,
) -> tuple[SessionRecord, EventRecord | None]:
    current = get(t, workspace_id, session_id)
    check_writable(current)
    values = changed(current, change(current))
    if not values:
        return current, None
    check_agent_change(current, values)
    texts: dict[str, Any] = {k: stored(v) if k in JSON_COLUMNS else v for k, v in values.items()}
    t.sessions[session_id] = replace(t.sessions[session_id], **texts, updated_at=now)
    body = {**event.body, **values}
    [logged] = events.append_log(t, now, session_id, [NewEvent(event.id, event.type, body)])
    if "budget" in values and _resumes(t, current, values["budget"]):
        runs.start(t, now, session_id)  # the turn the budget stopped goes on
    return get(t, workspace_id, session_id), logged


def _resumes(t: Tables, current: SessionRecord, budget: Json | None) -> bool:
    """The session waits at its budget (its last turn ended ``budget_reached``)
    and ``budget`` lets it go on."""
    if not budget_frees(current, budget):
        return False
    idles = [e for e in t.log.get(current.id, ()) if e.type == EventType.SESSION_STATUS_IDLE]
    last = loaded(idles[-1].body) if idles else {}
    return bool(last.get("stop_reason", {}).get("type") == "budget_reached")


def terminate(
    t: Tables, now: datetime, workspace_id: str, session_id: str, first: Sequence[NewEvent]
) -> list[EventRecord]:
    current = get(t, workspace_id, session_id)
    check_writable(current)
    if current.status in ("running", "rescheduling"):
        raise Conflict(f"session {session_id} is {current.status}; interrupt it before ending it")
    logged = events.append_log(t, now, session_id, first)
    logged += events.drain(t, now, session_id)  # the queue is logged before the end
    return logged + events.terminate(t, now, session_id)


def archive(
    t: Tables, now: datetime, workspace_id: str, session_id: str
) -> tuple[SessionRecord, list[EventRecord]]:
    current = get(t, workspace_id, session_id)
    if current.archived_at is not None:
        return current, []
    if current.status in ("running", "rescheduling"):
        raise Conflict(f"session {session_id} is {current.status}; interrupt it before archiving")
    logged = events.drain(t, now, session_id)  # the queue is logged: no turn will answer it
    t.sessions[session_id] = replace(t.sessions[session_id], archived_at=now)
    work.session_archived(t, now, session_id)
    return get(t, workspace_id, session_id), logged


def delete(t: Tables, workspace_id: str, session_id: str) -> None:
    current = get(t, workspace_id, session_id)
    if current.status in ("running", "rescheduling"):
        raise Conflict(f"session {session_id} is {current.status}; interrupt it before deleting")
    for table in (t.log, t.pending):
        table.pop(session_id, None)
    for rows in (t.ops, t.runs):
        for key in [k for k, row in rows.items() if row.session_id == session_id]:
            del rows[key]
    repositories.delete_for_session(t, session_id)
    memory_mounts.forget_session(t, session_id)
    leases.session_deleted(t, session_id)
    work.session_deleted(t, session_id)
    del t.sessions[session_id]


def _matches(t: Tables, row: SessionRow, where: SessionFilter) -> bool:
    bounds = (
        (where.created_gt, operator.gt),
        (where.created_gte, operator.ge),
        (where.created_lt, operator.lt),
        (where.created_lte, operator.le),
    )
    return (
        (where.agent_id is None or row.agent_id == where.agent_id)
        and (where.agent_version is None or row.agent_version == where.agent_version)
        and all(value is None or op(row.created_at, value) for value, op in bounds)
        and (where.include_archived or row.archived_at is None)
        and (not where.statuses or status(t, row) in where.statuses)
        # No session has a deployment yet: the filter matches nothing.
        and where.deployment_id is None
        and (
            where.memory_store_id is None
            or (row.id, where.memory_store_id) in t.session_memory_stores
        )
    )


def list_(
    t: Tables, workspace_id: str, page: PageRequest, where: SessionFilter
) -> Page[SessionRecord]:
    rows = [
        row
        for row in t.sessions.values()
        if row.workspace_id == workspace_id and _matches(t, row, where)
    ]
    found = page_of(rows, lambda r: (r.created_at, r.id), page)
    return Page([record(t, row) for row in found.items], found.has_next, found.has_prev)
