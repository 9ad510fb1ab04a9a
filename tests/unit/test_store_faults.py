"""The store when the database cannot serve a call: ``DatabaseBusy`` (the API's
retryable 503), never a hang, and calls work again once the database is back.

A call that waited too long for a free connection worker is refused without
running, on both backends. A PostgreSQL server of the test's own is crashed and
started again under an open store: calls in between are refused as busy, the
store recovers by itself, and what was committed before is still there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import anyio
import pytest

from stead.store import DatabaseBusy, open_store
from stead.store.workers import ConnectionWorkers
from tests.databases import BACKENDS
from tests.databases import engine as engine_of
from tests.pgcluster import ThrowawayPostgres, throwaway_postgres

pytestmark = pytest.mark.anyio
__all__ = ["throwaway_postgres"]  # the fixture, for this module's tests

WAIT = 0.2
HELD_FOR = 10.0
"""Upper bound on how long a test holds the workers busy (released earlier)."""


@pytest.fixture
def held() -> Iterator[threading.Event]:
    released = threading.Event()
    yield released
    released.set()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
async def test_a_call_that_waited_past_its_bound_for_a_worker_is_refused_as_busy(
    database_url: str, held: threading.Event
) -> None:
    engine = engine_of(database_url)
    workers = ConnectionWorkers(engine, 1, "faults", wait_seconds=WAIT)
    ran: list[str] = []
    try:
        started = threading.Event()

        def hold(_conn: object) -> None:
            started.set()
            held.wait(HELD_FOR)
            ran.append("hold")

        outcome: list[BaseException] = []

        async def late() -> None:
            try:
                await workers.run(lambda _conn: ran.append("late"))
            except DatabaseBusy as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(workers.run, hold)
            assert await anyio.to_thread.run_sync(started.wait, HELD_FOR)
            group.start_soon(late)
            await anyio.sleep(WAIT * 2)  # past the bound, then the worker frees
            held.set()
        assert [str(e) for e in outcome] == [f"no database connection came free in {WAIT}s"]
        assert ran == ["hold"], "the refused call never ran"
        assert await workers.run(lambda _conn: "served") == "served"
    finally:
        held.set()
        await anyio.to_thread.run_sync(workers.close)
        engine.dispose()


async def test_a_crashed_database_is_busy_until_it_is_back(
    throwaway_postgres: ThrowawayPostgres,
) -> None:
    cluster = throwaway_postgres
    store = await open_store(cluster.url(), wait_seconds=5.0)
    try:
        before = await store.create_workspace("before")
        cluster.stop()
        with pytest.raises(DatabaseBusy):
            await store.create_workspace("while down")
        with pytest.raises(DatabaseBusy):
            await store.list_workspaces()
        cluster.start()
        # The worker that met the crash made every other connection again:
        # the first calls after the restart are served.
        after = await store.create_workspace("after")
        names = {w.id: w.name for w in await store.list_workspaces()}
        assert names == {before.id: "before", after.id: "after"}, "nothing half-written"
        # Every reader worker, busy at once, serves again: none kept a connection
        # the restart cut.
        async with anyio.create_task_group() as group:
            for _ in range(24):
                group.start_soon(store.list_workspaces)
    finally:
        await store.close()


@pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
async def test_a_call_on_a_closed_store_is_refused_not_left_waiting(database_url: str) -> None:
    store = await open_store(database_url)
    await store.create_workspace("w")
    await store.close()
    with pytest.raises(DatabaseBusy, match="closed"):
        await store.list_workspaces()
    with pytest.raises(DatabaseBusy, match="closed"):
        await store.create_workspace("late")
