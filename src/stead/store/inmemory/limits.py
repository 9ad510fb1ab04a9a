"""Workspace and environment limits in memory (``_limits.py``'s rules; the
refusals themselves are its functions): a month's use is read from the ledger
and the leases as the SQL store reads them."""

from __future__ import annotations

from datetime import datetime

from stead import usage as accounting
from stead.store._limits import (
    check_names,
    month_start,
    refuse_model_request,
    refuse_sandbox,
)
from stead.store._usage import TOKEN_COLUMNS
from stead.store.errors import BudgetReached, LimitReached, NotFound
from stead.store.inmemory.tables import Tables, loaded
from stead.store.leases import SandboxLeaseStatus
from stead.store.limits import WORKSPACE, MonthUse


def get(t: Tables, workspace_id: str, scope: str = WORKSPACE) -> dict[str, int]:
    return {
        name: value
        for (workspace, held_scope, name), value in t.limits.items()
        if workspace == workspace_id and held_scope == scope
    }


def read(t: Tables, workspace_id: str, scope: str) -> dict[str, int]:
    _check_scope(t, workspace_id, scope)
    return get(t, workspace_id, scope)


def _check_scope(t: Tables, workspace_id: str, scope: str) -> None:
    if workspace_id not in t.workspaces:
        raise NotFound("workspace", workspace_id)
    env = t.environments.get(scope)
    if scope != WORKSPACE and (env is None or env.workspace_id != workspace_id):
        raise NotFound("environment", scope)


def set_limits(
    t: Tables, _now: datetime, workspace_id: str, scope: str, changes: dict[str, int | None]
) -> dict[str, int]:
    check_names(scope, changes)
    _check_scope(t, workspace_id, scope)
    for name, value in changes.items():
        if value is None:
            t.limits.pop((workspace_id, scope, name), None)
        else:
            t.limits[(workspace_id, scope, name)] = value
    return get(t, workspace_id, scope)


def _live(t: Tables, now: datetime, workspace_id: str, sandbox_id: str) -> tuple[int, bool]:
    """(sandboxes of the workspace with a live lease, whether ``sandbox_id`` is one)."""
    live = [
        lease.sandbox_id
        for lease in t.leases.values()
        if lease.workspace_id == workspace_id
        and lease.status == SandboxLeaseStatus.ACTIVE
        and lease.expires_at > now
    ]
    return len(live), sandbox_id in live


def month_use(t: Tables, now: datetime, workspace_id: str) -> MonthUse:
    since = month_start(now)
    rows = [
        dict(amounts.counters) | {"active_seconds": amounts.active_seconds}
        for (workspace, day, _, _), amounts in t.ledger.items()
        if workspace == workspace_id and day >= since.date()
    ]
    return MonthUse(
        since=since,
        tokens=sum(int(row.get(name, 0)) for row in rows for name in TOKEN_COLUMNS),
        list_cost_nanos=sum(int(row.get("list_cost_nanos", 0)) for row in rows),
        sandbox_seconds=sum(float(row["active_seconds"]) for row in rows),
        sandboxes=_live(t, now, workspace_id, "")[0],
    )


def check_model_request(t: Tables, now: datetime, workspace_id: str) -> None:
    refuse_model_request(get(t, workspace_id), lambda: month_use(t, now, workspace_id))


def allows_model_request(t: Tables, now: datetime, workspace_id: str) -> bool:
    try:
        check_model_request(t, now, workspace_id)
    except LimitReached:
        return False
    return True


def gate_model_request(t: Tables, now: datetime, session_id: str) -> None:
    """A run write's ``budget_gate``: the session's budget, then its workspace's limits."""
    row = t.sessions.get(session_id)
    if row is None:
        return
    if accounting.at_cap(loaded(row.budget), loaded(row.usage)):
        raise BudgetReached(session_id)
    check_model_request(t, now, row.workspace_id)


def check_sandbox(
    t: Tables, now: datetime, workspace_id: str, sandbox_id: str, session_id: str | None
) -> None:
    session = None if session_id is None else t.sessions.get(session_id)
    cap, used = None, 0.0
    if session is not None:
        cap = get(t, workspace_id, session.environment_id).get("session_sandbox_seconds")
        used = float(loaded(session.usage).get("active_seconds") or 0.0)
    refuse_sandbox(
        get(t, workspace_id),
        cap,
        used,
        lambda: month_use(t, now, workspace_id),
        lambda: _live(t, now, workspace_id, sandbox_id),
    )
