"""``together``: independent awaits run at once, results in order, and a
failure comes out as itself with the others cancelled."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest

from stead.runtime.together import together

pytestmark = pytest.mark.anyio


async def test_the_calls_run_at_once_and_give_their_results_in_order() -> None:
    started = [anyio.Event(), anyio.Event(), anyio.Event()]

    def waiting_for_all(index: int) -> Callable[[], Awaitable[int]]:
        async def call() -> int:
            started[index].set()
            for event in started:  # each waits until every one has started
                await event.wait()
            return index * 10

        return call

    with anyio.fail_after(10):
        results = await together(waiting_for_all(0), waiting_for_all(1), waiting_for_all(2))
    assert results == (0, 10, 20)


async def test_a_failure_is_raised_as_itself_and_cancels_the_others() -> None:
    cancelled = anyio.Event()

    async def fails() -> None:
        await anyio.lowlevel.checkpoint()
        raise LookupError("no such thing")

    async def waits() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    with anyio.fail_after(10), pytest.raises(LookupError, match="no such thing"):
        await together(waits, fails)
    assert cancelled.is_set()
