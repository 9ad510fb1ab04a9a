"""One client attached to a terminal over a host connection (rule 10).

The host sends ``TerminalData`` frames for the scrollback from the client's
offset, then ``TerminalReplayed``, then live output, and ``TerminalExit``
once the process has exited and every byte before it was sent; the call's
reply, ``TerminalEnd``, says why the attachment ended. The client may send
``TerminalInput``, ``TerminalResize`` and ``TerminalDetach`` at any time
(``stead.sandbox.ops``). The connection carries nothing else afterwards: the
host closes it.

A client that cannot keep up (it fell so far behind that the ring dropped
bytes it had not been sent, or a send stalls) is detached with a
``too_slow`` answer, so it never slows the process or other clients, and the
host holds no more than the ring per terminal.
"""

from __future__ import annotations

import contextlib

import anyio

from stead.sandbox import InvalidArgument, codec, ops
from stead.sandbox.protocol import FrameStream
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
) -> ops.TerminalEnd:
    """``send_seconds``: longest one frame may take to go out before the
    client counts as stalled (too slow)."""
    sender = _Sender(frames, send_seconds)
    """Serves one attachment until the process exits, the client detaches or
    goes away; returns the final answer."""
    offset = _start(terminal, offset)
    terminal.attached += 1
    sandbox.terminals += 1
    terminal.reader_at(sender.reader, offset)
    outcome = ops.TerminalEnd(reason="detached")
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_take_input, terminal, frames, tasks.cancel_scope)
            try:
                exit_code = await _send_output(terminal, sender, offset)
                outcome = ops.TerminalEnd(reason="exited", exit_code=exit_code)
            except (TooSlow, TimeoutError):
                outcome = ops.TerminalEnd(reason="too_slow")
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                outcome = ops.TerminalEnd(reason="gone")
            tasks.cancel_scope.cancel()
    finally:
        terminal.reader_at(sender.reader, None)
        terminal.attached -= 1
        sandbox.terminals -= 1
        sandbox.touch()
    return outcome


def _start(terminal: BackgroundProcess, offset: int) -> int:
    """Where the replay starts: ``offset``, or the oldest byte kept if the
    ring dropped it. An offset past the terminal's end was counted in another
    terminal of this id (one that went with its sandbox, destroyed or moved,
    while the client was away): this one's output all comes, from its oldest
    byte, and the client hears where it starts. Started there, the client saw
    nothing of the new shell until it had written as many bytes."""
    ring = terminal.ring
    return max(offset, ring.start) if offset <= ring.end else ring.start


async def _send_output(terminal: BackgroundProcess, sender: _Sender, offset: int) -> int | None:
    ring = terminal.ring
    position = offset
    position = await _send_chunks(terminal, sender, position, replay=True)
    await sender.send(ops.TerminalReplayed(offset=position))
    while True:
        await ring.wait_beyond(position)
        if ring.start > position:
            raise TooSlow
        position = await _send_chunks(terminal, sender, position, replay=False)
        if ring.closed and position >= ring.end:
            await terminal.exited.wait()
            if terminal.exit_code is not None:
                await sender.send(ops.TerminalExit(exit_code=terminal.exit_code))
            return terminal.exit_code


async def _send_chunks(
    terminal: BackgroundProcess, sender: _Sender, position: int, *, replay: bool
) -> int:
    for start, channel, data in terminal.ring.chunks(position):
        for cut in range(0, len(data), MAX_FRAME_DATA):
            piece = data[cut : cut + MAX_FRAME_DATA]
            await sender.send(ops.TerminalData(channel=channel, offset=start + cut, data=piece))
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

    async def send(self, frame: ops.Message) -> None:
        with anyio.fail_after(self.seconds):
            await self.frames.send(codec.encode(frame))


async def _take_input(
    terminal: BackgroundProcess, frames: FrameStream, scope: anyio.CancelScope
) -> None:
    with contextlib.suppress(
        anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError
    ):
        while True:
            try:
                control = codec.parse_terminal_control(await frames.receive())
                if isinstance(control, ops.TerminalDetach):
                    break
                if isinstance(control, ops.TerminalInput):
                    await terminal.write(control.data)
                else:
                    terminal.resize(control.rows, control.cols)
            except (InvalidArgument, ValueError):
                continue  # a bad control message loses nothing; the output goes on
    scope.cancel()
