"""Independent awaits run at once: a turn's round trips to the sandbox host and
the store that need nothing of each other take the longest one's time, not the
sum (staging before a turn's first tool call, capture at its end)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

import anyio

A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")


@overload
async def together(
    first: Callable[[], Awaitable[A]], second: Callable[[], Awaitable[B]], /
) -> tuple[A, B]: ...


@overload
async def together(
    first: Callable[[], Awaitable[A]],
    second: Callable[[], Awaitable[B]],
    third: Callable[[], Awaitable[C]],
    /,
) -> tuple[A, B, C]: ...


async def together(*calls: Callable[[], Awaitable[Any]]) -> tuple[Any, ...]:
    """Each call's result, in order. The first call runs in this task, the
    others in tasks of their own; when one fails the others are cancelled and
    its exception is raised as itself (not in an exception group), as it would
    have been had the calls run one after another."""
    results: list[Any] = [None] * len(calls)

    async def run(index: int) -> None:
        results[index] = await calls[index]()

    try:
        async with anyio.create_task_group() as group:
            for index in range(1, len(calls)):
                group.start_soon(run, index)
            await run(0)
    except BaseExceptionGroup as failed:
        raise _first(failed) from None
    return tuple(results)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    leaf = group.exceptions[0]
    return _first(leaf) if isinstance(leaf, BaseExceptionGroup) else leaf
