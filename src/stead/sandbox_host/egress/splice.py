"""Relaying bytes both ways between two streams until both ends finish, either
breaks, or ``idle_timeout`` passes with no byte in either direction.

An end of stream on one side is passed on as a half-close (``send_eof``) on the
other, so protocols that shut down writing and then read the answer keep working;
the idle timer bounds a peer that never finishes its half.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import ByteStream

CHUNK = 64 * 1024


async def splice(
    a: ByteStream,
    b: ByteStream,
    *,
    idle_timeout: float,
    a_to_b_first: bytes = b"",
) -> None:
    """Relays ``a`` <-> ``b``; returns (never raises for broken peers) when the
    relay ends. ``a_to_b_first`` is sent to ``b`` before anything else (bytes the
    client sent right behind its CONNECT head). Does not close either stream."""
    with anyio.CancelScope() as scope:

        def touch() -> None:
            scope.deadline = anyio.current_time() + idle_timeout

        touch()
        if a_to_b_first and not await _send(b, a_to_b_first):
            return
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_pump, a, b, touch, scope)
            tasks.start_soon(_pump, b, a, touch, scope)


async def _pump(
    source: ByteStream, sink: ByteStream, touch: Callable[[], None], scope: anyio.CancelScope
) -> None:
    while True:
        try:
            data = await source.receive(CHUNK)
        except anyio.EndOfStream:
            try:
                await sink.send_eof()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                scope.cancel()
            except NotImplementedError:  # TLS has no half-close: the relay ends here
                scope.cancel()
            return
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            scope.cancel()  # one side is gone: the other direction has nowhere to go
            return
        touch()
        if not await _send(sink, data):
            scope.cancel()
            return
        touch()


async def _send(sink: ByteStream, data: bytes) -> bool:
    try:
        await sink.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        return False
    return True
