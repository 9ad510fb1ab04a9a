"""Workspace and environment limits on SQLite, PostgreSQL and the in-memory store:
set and cleared, this month's use from the ledger, the model request gate and
the sandbox lease checks."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from stead.store import (
    WORKSPACE,
    LimitReached,
    NotFound,
    RunWrite,
    SqlStore,
    open_store,
)
from tests.databases import STORES
from tests.unit.test_store_usage import _claim, _event, _session, _used

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
MB = 1_000_000


async def test_limits_are_set_cleared_and_kept_apart(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store)
    other, _ = await _session(store)
    env_id = (await store.session_snapshot(session_id)).environment_id
    assert await store.limits(workspace_id) == {}
    changed = await store.set_limits(
        workspace_id, WORKSPACE, {"monthly_tokens": 5, "concurrent_sandboxes": 2}
    )
    assert changed == {"monthly_tokens": 5, "concurrent_sandboxes": 2}
    assert await store.set_limits(workspace_id, WORKSPACE, {"monthly_tokens": None}) == {
        "concurrent_sandboxes": 2
    }
    await store.set_limits(workspace_id, env_id, {"session_sandbox_seconds": 9})
    assert await store.limits(workspace_id, env_id) == {"session_sandbox_seconds": 9}
    assert await store.limits(workspace_id) == {"concurrent_sandboxes": 2}
    assert await store.limits(other) == {}
    with pytest.raises(NotFound):
        await store.set_limits(other, env_id, {"session_sandbox_seconds": 1})
    with pytest.raises(NotFound):
        await store.limits("wrkspc_nosuch")


async def test_this_months_use_counts_only_this_month(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store)
    claim = await _claim(store, session_id)
    await store.run_write(claim, RunWrite(usage=_used(7 * MB, tokens=100)))
    now = datetime.now(UTC)
    use = await store.month_use(workspace_id, now=now)
    assert (use.tokens, use.list_cost_nanos) == (200, 7 * MB)
    assert use.since == now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    next_month = (use.since + timedelta(days=32)).replace(day=1)
    later = await store.month_use(workspace_id, now=next_month)
    assert (later.tokens, later.list_cost_nanos, later.sandbox_seconds) == (0, 0, 0.0)


async def test_the_model_request_gate_stops_at_a_workspace_limit(store: SqlStore) -> None:
    workspace_id, session_id = await _session(store)
    claim = await _claim(store, session_id)
    gated = RunWrite(events=[_event("span.model_request_start")], budget_gate=True)
    await store.set_limits(workspace_id, WORKSPACE, {"monthly_tokens": 300})
    await store.run_write(claim, gated)
    await store.run_write(claim, RunWrite(usage=_used(MB, tokens=150)))
    before = await store.last_seq(session_id)
    with pytest.raises(LimitReached) as stopped:
        await store.run_write(claim, gated)
    assert stopped.value.limit == "monthly_tokens"
    assert await store.last_seq(session_id) == before  # nothing written
    await store.set_limits(workspace_id, WORKSPACE, {"monthly_tokens": None})
    await store.set_limits(workspace_id, WORKSPACE, {"monthly_list_cost_nanos": MB})
    with pytest.raises(LimitReached) as stopped:
        await store.run_write(claim, gated)
    assert stopped.value.limit == "monthly_list_cost"


async def test_sandbox_leases_obey_the_limits(store: SqlStore) -> None:
    workspace_id, first = await _session(store)
    second = await _another_session(store, first)
    env_id = (await store.session_snapshot(first)).environment_id

    async def acquire(session_id: str, ttl: float = 60.0) -> None:
        await store.acquire_sandbox_lease(
            session_id,
            workspace_id=workspace_id,
            session_id=session_id,
            environment_id=env_id,
            agent_id=None,
            ttl_seconds=ttl,
            enforce_limits=True,
        )

    await store.set_limits(workspace_id, WORKSPACE, {"concurrent_sandboxes": 1})
    await acquire(first)
    with pytest.raises(LimitReached) as stopped:
        await acquire(second)
    assert stopped.value.limit == "concurrent_sandboxes"
    await acquire(first)  # a held lease is renewed under the limit
    assert (await store.month_use(workspace_id)).sandboxes == 1
    await store.set_limits(workspace_id, WORKSPACE, {"concurrent_sandboxes": None})
    await store.set_limits(workspace_id, env_id, {"session_sandbox_seconds": 0})
    with pytest.raises(LimitReached) as stopped:
        await acquire(second)
    assert stopped.value.limit == "session_sandbox_seconds"
    assert await store.sandbox_lease(second) is None  # nothing written


@pytest.mark.sql
async def test_concurrent_acquires_from_several_processes_keep_the_concurrency_limit(
    store: SqlStore, database_url: str
) -> None:
    workspace_id, first = await _session(store)
    sessions = [first, *[await _another_session(store, first) for _ in range(7)]]
    env_id = (await store.session_snapshot(first)).environment_id
    await store.set_limits(workspace_id, WORKSPACE, {"concurrent_sandboxes": 1})
    # A store each, as the processes of one PostgreSQL database have.
    stores = [store, *[await open_store(database_url) for _ in sessions[1:]]]
    won: list[str] = []

    async def acquire(held: SqlStore, session_id: str) -> None:
        with contextlib.suppress(LimitReached):
            await held.acquire_sandbox_lease(
                session_id,
                workspace_id=workspace_id,
                session_id=session_id,
                environment_id=env_id,
                agent_id=None,
                ttl_seconds=60.0,
                enforce_limits=True,
            )
            won.append(session_id)

    try:
        async with anyio.create_task_group() as group:
            for held, session_id in zip(stores, sessions, strict=True):
                group.start_soon(acquire, held, session_id)
    finally:
        for other in stores[1:]:
            await other.close()
    assert len(won) == 1
    assert (await store.month_use(workspace_id)).sandboxes == 1


async def _another_session(store: SqlStore, session_id: str) -> str:
    """A new session of the same workspace, agent and environment."""
    first = await store.session_snapshot(session_id)
    made, _ = await store.create_session(
        first.workspace_id,
        (first.agent["id"], None),
        lambda a: {"id": a.id},
        first.environment_id,
        {"budget": None},
        [],
    )
    return made.id
