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

from stead.jsonvalues import Json
from stead.sandbox import InvalidArgument
from stead.sandbox.protocol import FrameStream, ProtocolError, decode_bytes, encode_bytes
from stead.sandbox_host.lifecycle import HostedSandbox
from stead.sandbox_host.processes import BackgroundProcess

MAX_FRAME_DATA = 64 * 1024


class TooSlow(Exception):
    """The client fell behind the scrollback ring."""


async def attach(
    sandbox: HostedSandbox,
    terminal: BackgroundProcess,
    frames: FrameStream,
    offset: int,
    *,
    send_seconds: float,
) -> Json:
    """``send_seconds``: longest one frame may take to go out before the
    client counts as stalled (too slow)."""
    sender = _Sender(frames, send_seconds)
    """Serves one attachment until the process exits, the client detaches or
    goes away; returns the final answer."""
    terminal.attached += 1
    sandbox.terminals += 1
    terminal.reader_at(sender.reader, max(offset, terminal.ring.start))
    outcome: Json = {"detached": True}
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_take_input, terminal, frames, tasks.cancel_scope)
            try:
                exit_code = await _send_output(terminal, sender, offset)
                outcome = {"exited": True, "exit_code": exit_code}
            except (TooSlow, TimeoutError):
                outcome = {"too_slow": True}
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                outcome = {"gone": True}
            tasks.cancel_scope.cancel()
    finally:
        terminal.reader_at(sender.reader, None)
        terminal.attached -= 1
        sandbox.terminals -= 1
        sandbox.touch()
    return outcome


async def _send_output(terminal: BackgroundProcess, sender: _Sender, offset: int) -> int | None:
    ring = terminal.ring
    position = max(offset, ring.start)
    position = await _send_chunks(terminal, sender, position, replay=True)
    await sender.send({"replayed": True, "offset": position})
    while True:
        await ring.wait_beyond(position)
        if ring.start > position:
            raise TooSlow
        position = await _send_chunks(terminal, sender, position, replay=False)
        if ring.closed and position >= ring.end:
            await terminal.exited.wait()
            if terminal.exit_code is not None:
                await sender.send({"exit": terminal.exit_code})
            return terminal.exit_code


async def _send_chunks(
    terminal: BackgroundProcess, sender: _Sender, position: int, *, replay: bool
) -> int:
    for start, channel, data in terminal.ring.chunks(position):
        for cut in range(0, len(data), MAX_FRAME_DATA):
            piece = data[cut : cut + MAX_FRAME_DATA]
            frame = {"data_b64": encode_bytes(piece), "channel": channel, "offset": start + cut}
            await sender.send(frame)
        position = start + len(data)
        terminal.reader_at(sender.reader, position)
        if not replay and terminal.ring.start > position:
            raise TooSlow
    return position


class _Sender:
    def __init__(self, frames: FrameStream, seconds: float) -> None:
        self.frames = frames
        self.seconds = seconds
        self.reader = id(frames)

    async def send(self, frame: Json) -> None:
        with anyio.fail_after(self.seconds):
            await self.frames.send(frame)


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
