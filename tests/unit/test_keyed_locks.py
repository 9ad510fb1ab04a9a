"""``KeyedLocks``: one holder per key at a time, and a key's lock forgotten once
nobody holds or waits for it, whichever way its holders and waiters leave."""

from __future__ import annotations

import anyio
import pytest

from stead.runtime.keyed_locks import KeyedLocks

pytestmark = pytest.mark.anyio


async def test_holders_of_one_key_take_turns_and_the_lock_goes_after() -> None:
    locks = KeyedLocks()
    inside = 0
    most = 0

    async def hold() -> None:
        nonlocal inside, most
        async with locks.hold("sandbox"):
            inside += 1
            most = max(most, inside)
            await anyio.sleep(0.01)
            assert len(locks) == 1
            inside -= 1

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(hold)
    assert most == 1
    assert len(locks) == 0


async def test_different_keys_do_not_wait_for_each_other() -> None:
    locks = KeyedLocks()
    async with locks.hold("a"):
        with anyio.fail_after(5):
            async with locks.hold("b"):
                assert len(locks) == 2
        assert len(locks) == 1
    assert len(locks) == 0


async def test_a_waiter_cancelled_leaves_the_lock_to_its_holder_then_it_goes() -> None:
    locks = KeyedLocks()
    release = anyio.Event()
    holding = anyio.Event()

    async def holder() -> None:
        async with locks.hold("k"):
            holding.set()
            await release.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(holder)
        await holding.wait()
        with anyio.move_on_after(0.01):
            async with locks.hold("k"):
                pytest.fail("the lock was held by another task")
        assert len(locks) == 1  # the holder still has it
        release.set()
    assert len(locks) == 0
    async with locks.hold("k"):  # a new lock for the same key
        assert len(locks) == 1


async def test_a_holder_that_raises_lets_go() -> None:
    locks = KeyedLocks()
    with pytest.raises(RuntimeError):
        async with locks.hold("k"):
            raise RuntimeError("the block failed")
    assert len(locks) == 0
    with anyio.fail_after(5):
        async with locks.hold("k"):
            pass
