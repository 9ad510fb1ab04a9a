"""Sessions. Status is derived from ``terminated_at`` and the runs table, never stored."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Row,
    Select,
    String,
    bindparam,
    case,
    cast,
    delete,
    exists,
    false,
    insert,
    literal,
    select,
    update,
)

from stead import usage as accounting
from stead.events import EventType
from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store import (
    _agents,
    _environments,
    _events,
    _leases,
    _locks,
    _memory_mounts,
    _repositories,
    _runs,
    _vaults,
    _work,
)
from stead.store._compiled import compiled
from stead.store._paging import fetch_page
from stead.store.base import (
    LIVE_RUN_STATUSES,
    AgentRecord,
    EnvironmentRecord,
    EventRecord,
    NewEvent,
    Page,
    PageRequest,
    RunStatus,
    SessionChange,
    SessionFilter,
    SessionRecord,
)
from stead.store.errors import Conflict, NotFound
from stead.store.tables import agents, environments, events, ops, pending, runs, sessions

T = TypeVar("T")


def _run_exists(*statuses: str) -> Any:
    return exists().where(runs.c.session_id == sessions.c.id, _runs.status_in(statuses))


STATUS = case(
    (sessions.c.terminated_at.is_not(None), literal("terminated")),
    (_run_exists(*LIVE_RUN_STATUSES), literal("running")),
    (_run_exists(RunStatus.RETRYING), literal("rescheduling")),
    else_=literal("idle"),
).label("status")

_SELECT = select(sessions, cast(STATUS, String).label("status"))


def _record(row: Row[Any] | SimpleNamespace) -> SessionRecord:
    return SessionRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        agent=row.agent,
        environment_id=row.environment_id,
        title=row.title,
        metadata=row.metadata,
        vault_ids=row.vault_ids,
        budget=row.budget,
        resources=row.resources,
        usage=row.usage,
        status=row.status,
        created_at=row.created_at,
        updated_at=row.updated_at,
        archived_at=row.archived_at,
        terminated_at=row.terminated_at,
    )


def _get_statement() -> Select[Any]:
    return _SELECT.where(
        sessions.c.id == bindparam("session_id"),
        sessions.c.workspace_id == bindparam("workspace_id"),
    )


def check_resources_open(current: SessionRecord) -> None:
    """``Conflict`` when the session's resources may not change: it is archived
    (read-only) or terminated."""
    if current.archived_at is not None or current.terminated_at is not None:
        raise Conflict(
            f"session {current.id} is archived or terminated; its resources cannot change"
        )


def get(conn: Connection, workspace_id: str, session_id: str) -> SessionRecord:
    statement = compiled(conn, "sessions.get", _get_statement)
    rows = statement.fetch(conn, {"session_id": session_id, "workspace_id": workspace_id})
    if not rows:
        raise NotFound("session", session_id)
    return _record(rows[0])


def _locked_statement() -> Select[Any]:
    return _get_statement().with_for_update(of=sessions)


def locked(conn: Connection, workspace_id: str, session_id: str) -> SessionRecord:
    """``_locks.session`` and ``get`` in one statement (one round trip). The row
    is read as of the lock, but PostgreSQL reads the runs, and so the status,
    as of the statement's start, before any wait for the lock: use it where the
    status decides nothing."""
    if conn.dialect.name == "sqlite":  # the write lock is held already
        return get(conn, workspace_id, session_id)
    statement = compiled(conn, "sessions.locked", _locked_statement)
    rows = statement.fetch(conn, {"session_id": session_id, "workspace_id": workspace_id})
    if not rows:
        raise NotFound("session", session_id)
    _locks.taken(conn, session_id)
    return _record(rows[0])


def create(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    agent_ref: tuple[str, int | None],
    build_agent: Callable[[AgentRecord], Json],
    environment_id: str,
    fields: dict[str, Any],
    initial_events: Sequence[NewEvent],
) -> tuple[SessionRecord, list[EventRecord]]:
    agent_id, version = agent_ref
    # Neither may be archived or deleted until this session is committed.
    _locks.row(conn, agents, agent_id, shared=True)
    _locks.row(conn, environments, environment_id, shared=True)
    agent = usable_agent(
        resolved("agent", lambda: _agents.get(conn, workspace_id, agent_id, version))
    )
    usable_environment(
        resolved("environment_id", lambda: _environments.get(conn, workspace_id, environment_id))
    )
    _vaults.check_attachable(conn, workspace_id, fields.get("vault_ids", []))
    session_id = new_id("session")
    row = {
        "id": session_id,
        "workspace_id": workspace_id,
        "agent_id": agent.id,
        "agent_version": agent.version,
        "agent": build_agent(agent),
        "environment_id": environment_id,
        "title": fields.get("title"),
        "metadata": fields.get("metadata", {}),
        "vault_ids": fields.get("vault_ids", []),
        "budget": fields.get("budget"),
        "resources": fields.get("resources", []),
        "usage": {},
        "last_seq": 0,
        "pending_tail": 0,
        "interrupt_tail": None,
        "created_at": now,
        "updated_at": now,
        "archived_at": None,
        "terminated_at": None,
    }
    compiled(conn, "sessions.insert", lambda: insert(sessions)).execute_many(conn, [row])
    _repositories.insert_for_session(
        conn, now, workspace_id, session_id, fields.get("repository_tokens", {})
    )
    _memory_mounts.attach(conn, workspace_id, session_id, row["resources"])
    logged = _events.append_log(conn, now, session_id, initial_events)
    status = "idle"
    if any(e.type == EventType.USER_MESSAGE for e in initial_events):
        _runs.start(conn, now, session_id)
        status = "running"  # a queued run is live (STATUS)
    # Built from what was written rather than read back: a new session's status
    # follows from its one possible run.
    return _record(SimpleNamespace(status=status, **row)), logged


def resolved(field: str, get: Callable[[], T]) -> T:
    """``get()``; a ``NotFound`` it raises names ``field``."""
    try:
        return get()
    except NotFound as exc:
        raise NotFound(exc.kind, exc.ident, field=field) from None


def usable_agent(agent: AgentRecord) -> AgentRecord:
    """``agent``, unless a new session may not use it."""
    if agent.archived_at is not None:
        raise Conflict(
            f"agent: agent {agent.id} is archived; new sessions cannot use it", status=400
        )
    return agent


def usable_environment(env: EnvironmentRecord) -> None:
    """Raises when a new session may not use ``env``."""
    if env.archived_at is not None:
        raise Conflict(
            f"environment_id: environment {env.id} is archived; new sessions cannot use it",
            code="environment_archived",
            status=400,
        )


def changed(current: object, values: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``values`` that differ from ``current``'s attributes."""
    return {k: v for k, v in values.items() if getattr(current, k) != v}


def update_(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    session_id: str,
    change: SessionChange,
    event: NewEvent,
) -> tuple[SessionRecord, EventRecord | None]:
    _locks.session(conn, session_id)
    current = get(conn, workspace_id, session_id)
    check_writable(current)
    values = changed(current, change(current))
    if not values:
        return current, None
    check_agent_change(current, values)
    conn.execute(
        update(sessions).where(sessions.c.id == session_id).values(**values, updated_at=now)
    )
    body = {**event.body, **values}
    [logged] = _events.append_log(conn, now, session_id, [NewEvent(event.id, event.type, body)])
    if "budget" in values and _resumes(conn, current, values["budget"]):
        _runs.start(conn, now, session_id)  # the turn the budget stopped goes on
    return get(conn, workspace_id, session_id), logged


def check_agent_change(current: SessionRecord, values: dict[str, Any]) -> None:
    if "agent" in values and current.status != "idle":
        raise Conflict(
            f"agent: session {current.id} is {current.status}; "
            "its tools can only change while it is idle"
        )


def budget_frees(current: SessionRecord, budget: Json | None) -> bool:
    """The session is idle at its budget and ``budget`` would let it go on (it
    resumes when its last turn also ended ``budget_reached``)."""
    if current.status != "idle" or not accounting.at_cap(current.budget, current.usage):
        return False
    return not accounting.at_cap(budget, current.usage)


def _resumes(conn: Connection, current: SessionRecord, budget: Json | None) -> bool:
    """The session waits at its budget (its last turn ended ``budget_reached``)
    and ``budget`` lets it go on."""
    if not budget_frees(current, budget):
        return False
    stmt = (
        select(events.c.body)
        .where(events.c.session_id == current.id, events.c.type == EventType.SESSION_STATUS_IDLE)
        .order_by(events.c.seq.desc())
        .limit(1)
    )
    last = conn.execute(stmt).scalar_one_or_none() or {}
    return bool(last.get("stop_reason", {}).get("type") == "budget_reached")


def terminate(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    session_id: str,
    logged_first: Sequence[NewEvent],
) -> list[EventRecord]:
    _locks.session(conn, session_id)
    current = get(conn, workspace_id, session_id)
    check_writable(current)
    if current.status in ("running", "rescheduling"):
        raise Conflict(f"session {session_id} is {current.status}; interrupt it before ending it")
    logged = _events.append_log(conn, now, session_id, logged_first)
    # What waits in the queue (at the budget's pause) is logged unanswered
    # before the end, as a turn that terminates its session logs it.
    logged += _events.drain(conn, now, session_id)
    return logged + _events.terminate(conn, now, session_id)


def check_writable(session: SessionRecord) -> None:
    if session.archived_at is not None:
        raise Conflict(f"session {session.id} is archived and read-only")
    if session.terminated_at is not None:
        raise Conflict(f"session {session.id} is terminated")


def archive(
    conn: Connection, now: datetime, workspace_id: str, session_id: str
) -> tuple[SessionRecord, list[EventRecord]]:
    _locks.session(conn, session_id)
    current = get(conn, workspace_id, session_id)
    if current.archived_at is not None:
        return current, []
    if current.status in ("running", "rescheduling"):
        raise Conflict(f"session {session_id} is {current.status}; interrupt it before archiving")
    # Archived, it takes no turn again: what waits in the queue (at the
    # budget's pause) is logged unanswered, as a terminated session logs it.
    logged = _events.drain(conn, now, session_id)
    conn.execute(update(sessions).where(sessions.c.id == session_id).values(archived_at=now))
    _work.session_archived(conn, now, session_id)
    return get(conn, workspace_id, session_id), logged


def delete_(conn: Connection, workspace_id: str, session_id: str) -> None:
    _locks.session(conn, session_id)
    current = get(conn, workspace_id, session_id)
    if current.status in ("running", "rescheduling"):
        raise Conflict(f"session {session_id} is {current.status}; interrupt it before deleting")
    for table in (events, pending, ops, runs):
        conn.execute(delete(table).where(table.c.session_id == session_id))
    _repositories.delete_for_session(conn, session_id)
    _memory_mounts.forget_session(conn, session_id)
    _leases.session_deleted(conn, session_id)
    _work.session_deleted(conn, session_id)
    conn.execute(delete(sessions).where(sessions.c.id == session_id))


def list_(
    conn: Connection, workspace_id: str, page: PageRequest, where: SessionFilter
) -> Page[SessionRecord]:
    stmt = _SELECT.where(sessions.c.workspace_id == workspace_id)
    conditions: list[tuple[object, Callable[[Any], Any]]] = [
        (where.agent_id, lambda v: sessions.c.agent_id == v),
        (where.agent_version, lambda v: sessions.c.agent_version == v),
        (where.created_gt, lambda v: sessions.c.created_at > v),
        (where.created_gte, lambda v: sessions.c.created_at >= v),
        (where.created_lt, lambda v: sessions.c.created_at < v),
        (where.created_lte, lambda v: sessions.c.created_at <= v),
    ]
    for value, condition in conditions:
        if value is not None:
            stmt = stmt.where(condition(value))
    if not where.include_archived:
        stmt = stmt.where(sessions.c.archived_at.is_(None))
    if where.statuses:
        stmt = stmt.where(STATUS.in_(list(where.statuses)))
    if where.memory_store_id is not None:
        stmt = stmt.where(
            sessions.c.id.in_(_memory_mounts.sessions_of(workspace_id, where.memory_store_id))
        )
    if where.deployment_id is not None:
        # No session has a deployment yet: the filter matches nothing.
        stmt = stmt.where(false())
    return fetch_page(conn, stmt, [sessions.c.created_at, sessions.c.id], page, _record)


def snapshot(conn: Connection, session_id: str) -> SessionRecord:
    statement = compiled(
        conn, "sessions.snapshot", lambda: _SELECT.where(sessions.c.id == bindparam("session_id"))
    )
    rows = statement.fetch(conn, {"session_id": session_id})
    if not rows:
        raise NotFound("session", session_id)
    return _record(rows[0])
