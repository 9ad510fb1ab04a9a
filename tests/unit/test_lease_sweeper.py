"""The lease sweeper on the in-memory store (the lease rules are the SQL store's,
proven alike by ``test_store_leases.py``): one round, failing destroys, the loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from stead.runtime.leases import LeaseSweeper, SweepRound
from stead.store import LeaseExpiry, SandboxLease
from stead.store.inmemory import InMemoryStore
from tests.unit.conftest import WAIT, leased_session

pytestmark = pytest.mark.anyio
T0 = datetime(2030, 1, 1, tzinfo=UTC)


class StepClock:
    """A clock the test moves: each ``sleep`` reports itself, then waits for a tick."""

    def __init__(self) -> None:
        self.current = T0
        self.slept_send: MemoryObjectSendStream[float]
        self.slept: MemoryObjectReceiveStream[float]
        self.tick_send: MemoryObjectSendStream[None]
        self.tick: MemoryObjectReceiveStream[None]
        self.slept_send, self.slept = anyio.create_memory_object_stream[float](1)
        self.tick_send, self.tick = anyio.create_memory_object_stream[None](1)

    def now(self) -> datetime:
        return self.current

    async def sleep(self, seconds: float) -> None:
        await self.slept_send.send(seconds)
        await self.tick.receive()
        self.current += timedelta(seconds=seconds)

    async def aclose(self) -> None:
        for stream in (self.slept_send, self.slept, self.tick_send, self.tick):
            await stream.aclose()


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
async def clock() -> AsyncIterator[StepClock]:
    made = StepClock()
    yield made
    await made.aclose()


class Destroyer:
    """Records destroys (and the reason each acted on); fails or hangs for the
    ids it is told to, or runs what it is told to while it destroys."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.reasons: list[LeaseExpiry | None] = []
        self.failing: set[str] = set()
        self.hanging: set[str] = set()
        self.meanwhile: dict[str, Callable[[], Awaitable[None]]] = {}

    async def __call__(self, lease: SandboxLease) -> SandboxLease:
        sandbox_id = lease.sandbox_id
        self.calls.append(sandbox_id)
        self.reasons.append(lease.expiry_reason)
        if sandbox_id in self.hanging:
            await anyio.sleep_forever()
        if sandbox_id in self.failing:
            raise RuntimeError(f"sandbox host refused to destroy {sandbox_id}")
        if sandbox_id in self.meanwhile:
            await self.meanwhile.pop(sandbox_id)()
        return lease


async def session_sandbox(store: InMemoryStore, ttl: float) -> tuple[str, str]:
    """(workspace id, sandbox id) of a leased session sandbox."""
    return await leased_session(store, ttl=ttl, now=T0)


def sweeper(store: InMemoryStore, destroy: Destroyer, clock: StepClock) -> LeaseSweeper:
    return LeaseSweeper(store, destroy, interval=30, destroy_timeout=0.05, clock=clock)


async def test_one_round_expires_destroys_and_records(
    store: InMemoryStore, clock: StepClock
) -> None:
    _, short = await session_sandbox(store, ttl=10)
    workspace_id, deleted = await session_sandbox(store, ttl=1000)
    _, live = await session_sandbox(store, ttl=1000)
    await store.delete_session(workspace_id, deleted)
    clock.current = T0 + timedelta(seconds=20)
    destroy = Destroyer()

    done = await sweeper(store, destroy, clock).sweep()

    assert {lease.sandbox_id: lease.expiry_reason for lease in done.expired} == {
        short: LeaseExpiry.TTL,
        deleted: LeaseExpiry.SESSION_DELETED,
    }
    assert sorted(destroy.calls) == sorted(done.destroyed) == sorted([short, deleted])
    assert done.failed == []
    assert await store.leases_to_destroy() == []
    assert await store.renew_sandbox_lease(live, now=clock.current)
    assert await sweeper(store, destroy, clock).sweep() == SweepRound()


async def test_a_session_deleted_during_its_destroy_is_destroyed_again_as_deleted(
    store: InMemoryStore, clock: StepClock
) -> None:
    """The destroy for the TTL kept a snapshot; the deletion, committed while it
    ran, must not be taken as done by it: the next round destroys again."""
    workspace_id, sandbox_id = await session_sandbox(store, ttl=10)
    clock.current = T0 + timedelta(seconds=20)
    destroy = Destroyer()
    destroy.meanwhile[sandbox_id] = lambda: store.delete_session(workspace_id, sandbox_id)
    sweeping = sweeper(store, destroy, clock)

    assert (await sweeping.sweep()).destroyed == []
    assert (await sweeping.sweep()).destroyed == [sandbox_id]
    assert destroy.reasons == [LeaseExpiry.TTL, LeaseExpiry.SESSION_DELETED]
    assert await store.leases_to_destroy() == []


async def test_a_failed_or_stuck_destroy_is_retried_next_round(
    store: InMemoryStore, clock: StepClock
) -> None:
    _, failing = await session_sandbox(store, ttl=10)
    _, stuck = await session_sandbox(store, ttl=10)
    _, fine = await session_sandbox(store, ttl=10)
    clock.current = T0 + timedelta(seconds=20)
    destroy = Destroyer()
    destroy.failing.add(failing)
    destroy.hanging.add(stuck)
    sweeping = sweeper(store, destroy, clock)

    first = await sweeping.sweep()
    assert sorted(first.failed) == sorted([failing, stuck])
    assert first.destroyed == [fine]
    assert sorted(lease.sandbox_id for lease in await store.leases_to_destroy()) == sorted(
        [failing, stuck]
    )

    destroy.failing.clear()
    destroy.hanging.clear()
    second = await sweeping.sweep()
    assert second.expired == [] and second.failed == []
    assert sorted(second.destroyed) == sorted([failing, stuck])
    assert await store.leases_to_destroy() == []


async def test_the_loop_survives_failing_rounds_and_stops_when_cancelled(
    store: InMemoryStore, clock: StepClock
) -> None:
    _, sandbox_id = await session_sandbox(store, ttl=10)
    destroy = Destroyer()
    destroy.failing.add(sandbox_id)
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as group:
            await group.start(sweeper(store, destroy, clock).serve)
            assert await clock.slept.receive() == 30  # round one at start: nothing due
            assert destroy.calls == []
            await clock.tick_send.send(None)  # 30 s later the TTL has passed
            await clock.slept.receive()
            assert destroy.calls == [sandbox_id]  # failed, and the loop went on
            destroy.failing.clear()
            await clock.tick_send.send(None)
            await clock.slept.receive()
            assert destroy.calls == [sandbox_id, sandbox_id]
            assert await store.leases_to_destroy() == []
            group.cancel_scope.cancel()


class BrokenOnce(InMemoryStore):
    """A store whose first lease expiry fails as a stead bug would."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = True

    async def expire_sandbox_leases(self, *, now: datetime | None = None) -> list[SandboxLease]:
        if self.broken:
            self.broken = False
            raise RuntimeError("a bug in this round")
        return await super().expire_sandbox_leases(now=now)


async def test_a_round_that_fails_unexpectedly_does_not_end_the_loop(
    clock: StepClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, any error but the database's ended the loop, and with it the
    server's lifespan: the store closed and every route answered 503."""
    broken = BrokenOnce()
    _, sandbox_id = await session_sandbox(broken, ttl=10)
    destroy = Destroyer()
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as group:
            await group.start(sweeper(broken, destroy, clock).serve)
            assert await clock.slept.receive() == 30  # the round failed; the loop waits
            assert "lease sweep failed; the next round tries again" in caplog.text
            assert "RuntimeError: a bug in this round" in caplog.text
            await clock.tick_send.send(None)
            await clock.slept.receive()
            assert destroy.calls == [sandbox_id]
            group.cancel_scope.cancel()


async def test_a_poke_sweeps_at_once(store: InMemoryStore, clock: StepClock) -> None:
    _, sandbox_id = await session_sandbox(store, ttl=1000)
    destroy = Destroyer()
    sweeping = sweeper(store, destroy, clock)
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as group:
            await group.start(sweeping.serve)
            assert await clock.slept.receive() == 30
            assert await store.expire_sandbox_lease(sandbox_id, now=clock.current)
            sweeping.poke()  # the clock never ticks: only the poke ends the wait
            assert await clock.slept.receive() == 30
            assert destroy.calls == [sandbox_id]
            assert await store.leases_to_destroy() == []
            group.cancel_scope.cancel()


async def test_the_sweeper_refuses_nonsense_settings(store: InMemoryStore) -> None:
    with pytest.raises(ValueError):
        LeaseSweeper(store, Destroyer(), interval=0, destroy_timeout=1)
