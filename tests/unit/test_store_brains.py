"""The brains of a shared store: rows, heartbeats, and the runs of dead brains
re-queued at once (on SQLite and PostgreSQL alike)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from stead.store import ClaimTerms, SqlStore, open_store
from tests.databases import STORES
from tests.unit.conftest import new_session

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]

HERE = "machine-a"


def terms(owner: str) -> ClaimTerms:
    return ClaimTerms(owner=owner, lease_seconds=3600.0, opening=lambda _a: [])


async def _running_run(store: SqlStore, owner: str) -> str:
    _, session_id = await new_session(store)
    run_id = await store.start_run(session_id)
    assert await store.claim_run(run_id, terms(owner)) is not None
    return run_id


async def test_a_brain_registers_beats_and_stops(store: SqlStore) -> None:
    await store.register_brain("b1", "host", HERE, 41)
    assert await store.brain_heartbeat("b1")
    [brain] = await store.list_brains()
    assert (brain.id, brain.host, brain.pid, brain.stopped_at) == ("b1", "host", 41, None)
    await store.stop_brain("b1")
    assert not await store.brain_heartbeat("b1")  # stopped: the caller registers again
    assert not await store.brain_heartbeat("nobody")


async def test_runs_of_dead_brains_are_requeued_and_live_ones_kept(store: SqlStore) -> None:
    await store.register_brain("live", "h", HERE, 1)
    await store.register_brain("gone", "h", HERE, 2)  # its pid is gone on this machine
    await store.register_brain("far", "h2", "machine-b", 2)  # same pid, another machine
    await store.register_brain("quit", "h", HERE, 3)
    await store.stop_brain("quit")
    kept = [await _running_run(store, owner) for owner in ("live", "far")]
    lost = [await _running_run(store, owner) for owner in ("gone", "quit")]
    requeued = await store.requeue_runs_of_dead_brains(3600.0, HERE, lambda pid: pid != 2, 3600.0)
    assert sorted(run for run, _ in requeued) == sorted(lost)
    assert {run for run, _ in await store.queued_runs()} == set(lost)
    assert not {run for run, _ in await store.queued_runs()} & set(kept)


async def test_a_silent_brain_is_dead_and_its_row_pruned_later(store: SqlStore) -> None:
    await store.register_brain("silent", "h", "elsewhere", 9)
    run = await _running_run(store, "silent")
    assert await store.requeue_runs_of_dead_brains(3600.0, HERE, lambda _p: True, 3600.0) == []
    requeued = await store.requeue_runs_of_dead_brains(-1.0, HERE, lambda _p: True, 3600.0)
    assert [r for r, _ in requeued] == [run]
    await store.requeue_runs_of_dead_brains(-1.0, HERE, lambda _p: True, -1.0)
    assert await store.list_brains() == []


async def test_a_brain_whose_clock_is_behind_is_not_taken_for_dead(
    store: SqlStore, database_url: str
) -> None:
    """Brains on machines whose clocks differ share the store: before, each
    wrote its heartbeat and leases on its own clock, so a brain a minute behind
    was dead to the others (its runs re-queued and run twice) while it ran."""
    if not database_url.startswith("postgresql"):
        pytest.skip("several processes share a store on PostgreSQL only")
    behind = await open_store(database_url)
    try:
        behind._now = lambda: datetime.now(UTC) - timedelta(seconds=60)
        await behind.register_brain("behind", "h2", "machine-b", 7)
        assert await behind.brain_heartbeat("behind")
        _, session_id = await new_session(behind)
        run_id = await behind.start_run(session_id)
        short = ClaimTerms(owner="behind", lease_seconds=30.0, opening=lambda _a: [])
        assert await behind.claim_run(run_id, short) is not None
        assert await store.requeue_runs_of_dead_brains(20.0, HERE, lambda _p: True, 3600.0) == []
        assert await store.requeue_runs() == []
    finally:
        await behind.close()
