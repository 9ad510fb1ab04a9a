"""The work queue's long polls: a queued item wakes them, a poll that timed out
returns; either way nothing of the wait is kept, nor more environments' pollers
than the queue remembers."""

from __future__ import annotations

import anyio
import pytest

from stead.config import Settings
from stead.runtime import work
from stead.runtime.bus import LocalBus
from stead.runtime.logcache import LogCache
from stead.runtime.work import WorkQueue
from stead.store.inmemory import InMemoryStore

pytestmark = pytest.mark.anyio


def _queue() -> WorkQueue:
    store = InMemoryStore()
    return WorkQueue(Settings(), store, LocalBus(16), LogCache(store))


async def test_a_notice_wakes_every_poll_of_the_environment_and_none_is_kept() -> None:
    queue = _queue()
    woke: list[str] = []

    async def poll(name: str) -> None:
        await queue.wait_for_work("env_a", 30)
        woke.append(name)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(poll, "first")
            group.start_soon(poll, "second")
            await anyio.sleep(0.01)
            queue.notify("env_b")  # another environment's item wakes neither
            await anyio.sleep(0.01)
            assert woke == []
            queue.notify("env_a")
    assert sorted(woke) == ["first", "second"]
    assert queue._arrivals == {}


async def test_polls_that_time_out_leave_nothing_behind() -> None:
    queue = _queue()
    async with anyio.create_task_group() as group:
        for seconds in (0.01, 0.05):
            group.start_soon(queue.wait_for_work, "env_a", seconds)
        await anyio.sleep(0.02)
        assert list(queue._arrivals) == ["env_a"]  # the longer poll still waits
    assert queue._arrivals == {}


async def test_pollers_are_counted_per_environment_for_the_environments_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(work, "ENVIRONMENTS_KEPT", 3)
    queue = _queue()
    queue.polled("env_0", "worker_a")
    queue.polled("env_0", "worker_b")
    queue.polled("env_0", "worker_a")
    assert queue.workers_polling("env_0") == 2
    for n in range(1, 4):
        queue.polled(f"env_{n}", None)
    assert queue.workers_polling("env_0") == 0  # the least recently polled went
    assert [queue.workers_polling(f"env_{n}") for n in range(1, 4)] == [1, 1, 1]
