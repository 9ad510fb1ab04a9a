"""One client attached to a terminal over a host connection (rule 10).

The host sends ``{"data_b64", "channel", "offset"}`` frames for the scrollback
from the client's offset, then ``{"replayed": true, "offset"}``, then live
output, and ``{"exit": code}`` once the process has exited and every byte
before it was sent. The client may send ``{"input_b64"}``, ``{"resize":
{"rows", "cols"}}`` and ``{"detach": true}`` at any time. The connection
carries nothing else afterwards: the host closes it.

A client that cannot keep up (it fell so far behind that the ring dropped
bytes it had not been sent, or a send stalls) is detached with a
``too_slow`` answer, so it never slows the process or other clients, and the
host holds no more than the ring per terminal.
"""

from __future__ import annotations

import contextlib

import anyio

from stead.sandbox.errors import InvalidArgument
from stead.sandbox.host.lifecycle import HostedSandbox
from stead.sandbox.host.processes import BackgroundProcess
from stead.sandbox.host.protocol import FrameStream, Json, ProtocolError, decode_bytes, encode_bytes

SEND_SECONDS = 30.0
"""Longest one frame may take to go out before the client counts as stalled."""
MAX_FRAME_DATA = 64 * 1024


class TooSlow(Exception):
    """The client fell behind the scrollback ring."""


async def attach(
    sandbox: HostedSandbox, terminal: BackgroundProcess, frames: FrameStream, offset: int
) -> Json:
    """Serves one attachment until the process exits, the client detaches or
    goes away; returns the final answer."""
    terminal.attached += 1
    sandbox.terminals += 1
    reader = id(frames)
    terminal.reader_at(reader, max(offset, terminal.ring.start))
    outcome: Json = {"detached": True}
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_take_input, terminal, frames, tasks.cancel_scope)
            try:
                exit_code = await _send_output(terminal, frames, offset)
                outcome = {"exited": True, "exit_code": exit_code}
            except TooSlow:
                outcome = {"too_slow": True}
            except (TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                outcome = {"gone": True}
            tasks.cancel_scope.cancel()
    finally:
        terminal.reader_at(reader, None)
        terminal.attached -= 1
        sandbox.terminals -= 1
        sandbox.touch()
    return outcome


async def _send_output(terminal: BackgroundProcess, frames: FrameStream, offset: int) -> int | None:
    ring = terminal.ring
    position = max(offset, ring.start)
    position = await _send_chunks(terminal, frames, position, id(frames), replay=True)
    await _send(frames, {"replayed": True, "offset": position})
    while True:
        await ring.wait_beyond(position)
        if ring.start > position:
            raise TooSlow
        position = await _send_chunks(terminal, frames, position, id(frames), replay=False)
        if ring.closed and position >= ring.end:
            await terminal.exited.wait()
            if terminal.exit_code is not None:
                await _send(frames, {"exit": terminal.exit_code})
            return terminal.exit_code


async def _send_chunks(
    terminal: BackgroundProcess, frames: FrameStream, position: int, reader: int, *, replay: bool
) -> int:
    for start, channel, data in terminal.ring.chunks(position):
        for cut in range(0, len(data), MAX_FRAME_DATA):
            piece = data[cut : cut + MAX_FRAME_DATA]
            frame = {"data_b64": encode_bytes(piece), "channel": channel, "offset": start + cut}
            await _send(frames, frame)
        position = start + len(data)
        terminal.reader_at(reader, position)
        if not replay and terminal.ring.start > position:
            raise TooSlow
    return position


async def _send(frames: FrameStream, frame: Json) -> None:
    with anyio.fail_after(SEND_SECONDS):
        await frames.send(frame)


async def _take_input(
    terminal: BackgroundProcess, frames: FrameStream, scope: anyio.CancelScope
) -> None:
    with contextlib.suppress(
        anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError
    ):
        while True:
            frame = await frames.receive()
            if frame.get("detach"):
                break
            try:
                if "input_b64" in frame:
                    await terminal.write(decode_bytes(frame["input_b64"]))
                elif isinstance(size := frame.get("resize"), dict):
                    terminal.resize(int(size.get("rows", 0)), int(size.get("cols", 0)))
            except (InvalidArgument, ProtocolError, TypeError, ValueError):
                continue  # a bad control message loses nothing; the output goes on
    scope.cancel()
