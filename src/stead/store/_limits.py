"""Workspace and environment limits (``limits.py``): stored values and the checks
that run inside the store's transactions."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, bindparam, case, delete, func, select

from stead import usage as accounting
from stead.store import _leases, _locks, _usage
from stead.store._compiled import compiled
from stead.store._leases import _insert
from stead.store.errors import BudgetReached, LimitReached, NotFound
from stead.store.leases import (
    SandboxLease,
)
from stead.store.limits import (
    ENVIRONMENT_LIMITS,
    WORKSPACE,
    WORKSPACE_LIMITS,
    MonthTotals,
    MonthUse,
)
from stead.store.tables import (
    environments,
    sandbox_leases,
    sessions,
    usage_months,
    workspace_limits,
    workspaces,
)


def _limits_statement() -> Any:
    table = workspace_limits.c
    return select(table.name, table.value).where(
        table.workspace_id == bindparam("workspace_id"), table.scope == bindparam("scope")
    )


def get(conn: Connection, workspace_id: str, scope: str = WORKSPACE) -> dict[str, int]:
    rows = compiled(conn, "limits.get", _limits_statement).fetch(
        conn, {"workspace_id": workspace_id, "scope": scope}
    )
    return {row.name: int(row.value) for row in rows}


def _check_scope(conn: Connection, workspace_id: str, scope: str) -> None:
    found = select(workspaces.c.id).where(workspaces.c.id == workspace_id)
    if conn.execute(found).first() is None:
        raise NotFound("workspace", workspace_id)
    if scope != WORKSPACE:
        env = select(environments.c.id).where(
            environments.c.id == scope, environments.c.workspace_id == workspace_id
        )
        if conn.execute(env).first() is None:
            raise NotFound("environment", scope)


def read(conn: Connection, workspace_id: str, scope: str = WORKSPACE) -> dict[str, int]:
    """``get`` for a caller outside a check: ``NotFound`` for an unknown scope."""
    _check_scope(conn, workspace_id, scope)
    return get(conn, workspace_id, scope)


def set_limits(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    scope: str,
    changes: dict[str, int | None],
) -> dict[str, int]:
    check_names(scope, changes)
    _check_scope(conn, workspace_id, scope)
    table = workspace_limits.c
    for name, value in changes.items():
        where = (table.workspace_id == workspace_id) & (table.scope == scope) & (table.name == name)
        if value is None:
            conn.execute(delete(workspace_limits).where(where))
            continue
        row = {"workspace_id": workspace_id, "scope": scope, "name": name}
        insert = _insert(conn, workspace_limits).values(**row, value=value, updated_at=now)
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=["workspace_id", "scope", "name"],
                set_={"value": insert.excluded.value, "updated_at": now},
            )
        )
    return get(conn, workspace_id, scope)


def check_names(scope: str, changes: dict[str, int | None]) -> None:
    """``ValueError`` for a limit the scope does not have."""
    known = WORKSPACE_LIMITS if scope == WORKSPACE else ENVIRONMENT_LIMITS
    unknown = sorted(set(changes) - set(known))
    if unknown:
        raise ValueError(f"unknown limit {unknown[0]!r}: one of {', '.join(known)}")


def month_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _month_statement() -> Any:
    months = usage_months.c
    return select(months.tokens, months.list_cost_nanos, months.active_seconds).where(
        months.workspace_id == bindparam("workspace_id"), months.month == bindparam("month")
    )


def month_totals(conn: Connection, now: datetime, workspace_id: str) -> MonthTotals:
    """What the workspace used this UTC month: one ``usage_months`` row."""
    since = month_start(now)
    values = {"workspace_id": workspace_id, "month": since.strftime("%Y-%m")}
    rows = compiled(conn, "limits.month", _month_statement).fetch(conn, values)
    if not rows:
        return MonthTotals(since=since, tokens=0, list_cost_nanos=0, sandbox_seconds=0.0)
    used = rows[0]
    return MonthTotals(
        since=since,
        tokens=int(used.tokens),
        list_cost_nanos=int(used.list_cost_nanos),
        sandbox_seconds=float(used.active_seconds),
    )


def _sandboxes_statement() -> Any:
    leases = sandbox_leases.c
    held = func.sum(case((leases.sandbox_id == bindparam("sandbox_id"), 1), else_=0))
    return select(func.count().label("count"), held.label("held")).where(
        leases.workspace_id == bindparam("workspace_id"),
        leases.status == "active",
        leases.expires_at > bindparam("now"),
    )


def _sandboxes(conn: Connection, now: datetime, workspace_id: str, sandbox_id: str = "") -> Any:
    """(count, held): sandboxes with a live lease, and whether ``sandbox_id`` has one."""
    values = {"workspace_id": workspace_id, "now": now, "sandbox_id": sandbox_id}
    # Aggregates run uncompiled: the hot-path helper cannot read PostgreSQL's numeric sums.
    return conn.execute(_sandboxes_statement(), values).one()


def month_use(conn: Connection, now: datetime, workspace_id: str) -> MonthUse:
    totals = month_totals(conn, now, workspace_id)
    return MonthUse(
        since=totals.since,
        tokens=totals.tokens,
        list_cost_nanos=totals.list_cost_nanos,
        sandbox_seconds=totals.sandbox_seconds,
        sandboxes=int(_sandboxes(conn, now, workspace_id).count),
    )


def _dollars(nanos: int) -> str:
    return f"${nanos / 1e9:,.2f}"


def check_model_request(conn: Connection, now: datetime, workspace_id: str) -> None:
    """Raises ``LimitReached`` when the workspace's monthly tokens or list cost
    allow no more model requests."""
    refuse_model_request(get(conn, workspace_id), lambda: month_totals(conn, now, workspace_id))


def refuse_model_request(limits: dict[str, int], month: Callable[[], MonthTotals]) -> None:
    """``check_model_request`` given the workspace's ``limits`` and a reader of
    its month's use (read only when a limit needs it)."""
    tokens, cost = limits.get("monthly_tokens"), limits.get("monthly_list_cost_nanos")
    if tokens is None and cost is None:
        return
    use = month()
    month_name = use.since.strftime("%Y-%m")
    if tokens is not None and use.tokens >= tokens:
        raise LimitReached(
            "monthly_tokens",
            f"the workspace's monthly token limit is reached: {use.tokens:,} of {tokens:,} "
            f"tokens used in {month_name} (an operator raises it with `stead limits set`)",
        )
    if cost is not None and use.list_cost_nanos >= cost:
        raise LimitReached(
            "monthly_list_cost",
            f"the workspace's monthly spend limit is reached: {_dollars(use.list_cost_nanos)} "
            f"of {_dollars(cost)} list cost in {month_name} (an operator raises it with "
            "`stead limits set`)",
        )


def _session_statement() -> Any:
    return select(sessions.c.usage, sessions.c.environment_id).where(
        sessions.c.id == bindparam("session_id")
    )


def check_sandbox(
    conn: Connection, now: datetime, workspace_id: str, sandbox_id: str, session_id: str | None
) -> None:
    """Raises ``LimitReached`` when the workspace's or the session's environment's
    limits allow the sandbox no more time, or no new sandbox may start."""
    cap, used = None, 0.0
    if session_id is not None:
        row = compiled(conn, "limits.session", _session_statement).fetch(
            conn, {"session_id": session_id}
        )
        if row:
            cap = get(conn, workspace_id, row[0].environment_id).get("session_sandbox_seconds")
            used = float((row[0].usage or {}).get("active_seconds") or 0.0)

    def live() -> tuple[int, bool]:
        # Held until commit (PostgreSQL): a lease another transaction is making
        # for the workspace counts before this one decides, as on SQLite.
        _locks.row(conn, workspaces, workspace_id)
        found = _sandboxes(conn, now, workspace_id, sandbox_id)
        return int(found.count), bool(found.held)

    refuse_sandbox(
        get(conn, workspace_id), cap, used, lambda: month_totals(conn, now, workspace_id), live
    )


def refuse_sandbox(
    limits: dict[str, int],
    session_cap: int | None,
    session_used: float,
    month: Callable[[], MonthTotals],
    live: Callable[[], tuple[int, bool]],
) -> None:
    """``check_sandbox`` given the workspace's ``limits``, the session's cap and
    use of sandbox time, and readers of the month's use and of (sandboxes with a
    live lease, whether this one holds one), read only when a limit needs them."""
    if session_cap is not None and session_used >= session_cap:
        raise LimitReached(
            "session_sandbox_seconds",
            f"the environment's sandbox time limit per session is reached: "
            f"{session_used:,.0f} of {session_cap:,} seconds (an operator raises it with "
            "`stead limits set-environment`)",
        )
    seconds = limits.get("monthly_sandbox_seconds")
    if seconds is not None:
        use = month()
        if use.sandbox_seconds >= seconds:
            raise LimitReached(
                "monthly_sandbox_seconds",
                f"the workspace's monthly sandbox time limit is reached: "
                f"{use.sandbox_seconds:,.0f} of {seconds:,} seconds in "
                f"{use.since:%Y-%m} (an operator raises it with `stead limits set`)",
            )
    most = limits.get("concurrent_sandboxes")
    if most is not None:
        # A sandbox that holds its lease keeps it (even under a lowered limit).
        count, held = live()
        if not held and count >= most:
            raise LimitReached(
                "concurrent_sandboxes",
                f"the workspace's limit of {most} concurrent sandboxes is reached: "
                "wait for one to be released, or an operator raises it with `stead limits set`",
            )


def gate_model_request(conn: Connection, now: datetime, session_id: str) -> None:
    """What a run write's ``budget_gate`` checks: the session's budget
    (``BudgetReached``), then its workspace's limits (``LimitReached``)."""
    row = _usage.session_row(conn, session_id)
    if row is None:
        return
    if accounting.at_cap(row.budget, row.usage or {}):
        raise BudgetReached(session_id)
    check_model_request(conn, now, row.workspace_id)


def allows_model_request(conn: Connection, now: datetime, workspace_id: str) -> bool:
    try:
        check_model_request(conn, now, workspace_id)
    except LimitReached:
        return False
    return True


def acquire_lease(
    conn: Connection,
    now: datetime,
    sandbox_id: str,
    workspace_id: str,
    session_id: str | None,
    *lease: Any,
) -> SandboxLease:
    """``_leases.acquire`` (``lease``: its other arguments) once the limits allow
    the sandbox more time."""
    check_sandbox(conn, now, workspace_id, sandbox_id, session_id)
    return _leases.acquire(conn, now, sandbox_id, workspace_id, session_id, *lease)
