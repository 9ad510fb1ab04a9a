"""A persistent bash process that runs one command at a time.

Framing: each command goes to bash's stdin as ``eval $'<command>' </dev/null
>&2 2>&1`` followed by a ``printf`` of a per-call marker and ``$?``. The command
is quoted as one ANSI-C string, so a syntax error in it (an unbalanced quote)
is reported by ``eval`` instead of swallowing the framing; stdin is
``/dev/null`` so a command that reads input gets EOF instead of the next
command. The marker is split by quotes in what bash reads, so echoing the input
(``set -v``) cannot fake it, and it only counts when printed as
``\\n<marker><digits>\\n``.

stdout and stderr are the same pipe, so ``>&2 2>&1`` changes neither, but bash
restores what a builtin's redirections replace when the builtin returns: a
command that redirects the shell's own output (``exec >log``, ``exec
2>/dev/null``) does so for the rest of its call, not for the marker nor for the
calls after it. Bash reads a pipe one byte per system call, so each byte of
framing costs one: keep it short.

The shell leads its own session; a timeout, a cancellation or the shell's own
exit kills the whole group, and the owner starts a fresh shell next time. Its
exit is watched for its whole life (``ShellProcess.on_exit``), not only as the
end of its output, which a job it started in the background may hold open.
Not safe for concurrent use: the owner runs one command at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import anyio
from anyio.abc import Process

from stead.sandbox.base import ExecResult
from stead.sandbox.errors import InvalidArgument, SandboxUnavailable
from stead.sandbox.local.processes import dispose, kill_group, spawn

BASH = ("/bin/bash", "--noprofile", "--norc")
READ_CHUNK = 64 * 1024
EXITED_DRAIN_SECONDS = 2.0
"""How long the output of a shell that exited is still read while something it
started, outside its group, holds the output open."""
END_CODE = re.compile(rb"(\d{1,3})\n")
"""What follows the marker at the end of a command: its exit code. Compiled
once, where a pattern of each call's marker cost some 60 µs of CPU a call."""


class OutputTail:
    """The last ``limit`` bytes of a stream, trimmed in amortised O(1) per byte.

    ``on_output``, when given, sees the output as it arrives, except the last
    ``STREAM_HOLD_BACK`` bytes until more follow: the end of a command's output
    carries the shell's end marker, which must not be shown as output. The
    result's ``output`` is the authoritative copy."""

    STREAM_HOLD_BACK = 64

    def __init__(self, limit: int, on_output: Callable[[bytes], None] | None = None) -> None:
        self.limit = limit
        self.buffer = bytearray()
        self.dropped = 0
        """Bytes dropped from the front so far."""
        self._on_output = on_output
        self._streamed = 0

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        if self._on_output is not None:
            upto = self.dropped + len(self.buffer) - self.STREAM_HOLD_BACK
            if upto > self._streamed:
                self._on_output(
                    bytes(self.buffer[self._streamed - self.dropped : upto - self.dropped])
                )
                self._streamed = upto
        # Keep room for the marker line beyond the limit; trim only at 2x so a
        # long output costs one copy per ``limit`` bytes, not one per chunk.
        if len(self.buffer) > 2 * self.limit + 256:
            cut = len(self.buffer) - self.limit - 256
            del self.buffer[:cut]
            self.dropped += cut

    def text(self, end: int | None = None) -> tuple[str, bool]:
        """(decoded output up to ``end``, whether its beginning was dropped)."""
        data = bytes(self.buffer[:end] if end is not None else self.buffer)
        truncated = self.dropped > 0 or len(data) > self.limit
        if len(data) > self.limit:
            data = data[-self.limit :]
        if truncated:  # the cut may have split a UTF-8 sequence
            skip = 0
            while skip < min(3, len(data)) and 0x80 <= data[skip] < 0xC0:
                skip += 1
            data = data[skip:]
        return data.decode("utf-8", errors="replace"), truncated


class ShellProcess(Protocol):
    """The shell's process as the shell needs it: a local child, or a process
    inside an isolating sandbox reached through its supervisor."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def send(self, data: bytes) -> None:
        """Writes to stdin; raises anyio's Broken/ClosedResourceError if it is gone."""
        ...

    async def receive(self, max_bytes: int) -> bytes:
        """Reads stdout (stderr merged); ``anyio.EndOfStream`` at its end."""
        ...

    def on_exit(self, callback: Callable[[], None]) -> None:
        """Calls ``callback`` once, from the event loop, when the process has
        exited (at once if it has); it must not block nor raise. One watch for
        the process's whole life: a call costs nothing more."""
        ...

    async def kill(self) -> None:
        """SIGKILLs the process group (what the shell left running), its
        streams left open; never raises."""
        ...

    async def dispose(self) -> None:
        """Kills the process group and reaps; never raises, survives cancellation."""
        ...


class LocalShellProcess:
    """A shell that is a plain child of this process (``unsafe_local``).

    Its exit is watched through a pidfd the event loop polls: a reader
    callback, not a task, since nothing that owns the shell owns a task group
    to run one in for the shell's life."""

    def __init__(self, process: Process) -> None:
        self._process = process
        self._watch: tuple[asyncio.AbstractEventLoop, int] | None = None

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def send(self, data: bytes) -> None:
        assert self._process.stdin is not None
        await self._process.stdin.send(data)

    async def receive(self, max_bytes: int) -> bytes:
        assert self._process.stdout is not None
        return await self._process.stdout.receive(max_bytes)

    def on_exit(self, callback: Callable[[], None]) -> None:
        try:
            # Just spawned, so this pid is still the shell's (a reaped one raises).
            pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            callback()
            return
        except OSError:  # no pidfds (Linux before 5.3): the exit shows as the output's end
            return
        loop = asyncio.get_running_loop()

        def exited() -> None:
            self._unwatch()
            callback()

        self._watch = (loop, pidfd)
        loop.add_reader(pidfd, exited)

    async def kill(self) -> None:
        kill_group(self._process)

    async def dispose(self) -> None:
        try:
            await dispose(self._process)
        finally:
            self._unwatch()

    def _unwatch(self) -> None:
        if self._watch is not None:
            (loop, pidfd), self._watch = self._watch, None
            loop.remove_reader(pidfd)
            os.close(pidfd)


class Shell:
    def __init__(self, process: ShellProcess) -> None:
        self._process = process
        self._exited = False
        self._call: anyio.CancelScope | None = None
        """The running call's scope, which the shell's exit cancels."""
        process.on_exit(self._on_exit)

    @classmethod
    async def start(cls, cwd: Path, env: Mapping[str, str], argv: Sequence[str] = BASH) -> Shell:
        try:
            process = await spawn(argv, cwd=cwd, env=env, stderr_to_stdout=True)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot start the shell: {exc.strerror or exc}") from None
        return cls(LocalShellProcess(process))

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def alive(self) -> bool:
        return self._process.returncode is None

    async def run(self, command: str, *, time_limit: float, tail: OutputTail) -> ExecResult:
        """Runs ``command``; output goes into ``tail`` as it arrives.

        On timeout or when the shell ends, the shell is disposed of and the
        result says so. On cancellation the shell's group is killed at once,
        the shell is disposed of, and the cancellation propagates.
        """
        marker = f"__STEAD_{secrets.token_hex(12)}__"
        framed = _frame(command, marker)
        code: tuple[int, int] | None = None
        try:
            with anyio.move_on_after(time_limit) as deadline:
                self._call = deadline
                if self._exited:  # it exited since the owner looked at ``alive``
                    deadline.cancel()
                await self._send(framed)
                code = await self._read_until(marker.encode(), tail)
            self._call = None
            # Before any await: disposing of the shell below is an exit too.
            timed_out = deadline.cancelled_caught and not self._exited
            if deadline.cancelled_caught and not timed_out:
                code = await self._read_exited(marker.encode(), tail)
        except BaseException:
            self._call = None
            await self._process.dispose()
            raise
        if code is not None:
            end, exit_code = code
            output, truncated = tail.text(end)
            return ExecResult(output, exit_code, truncated)
        await self._process.dispose()
        output, truncated = tail.text()
        if timed_out:
            return ExecResult(output, None, truncated, timed_out=True)
        status = self._process.returncode  # the shell ended before the marker
        shell_code = status if status is None or status >= 0 else 128 - status
        return ExecResult(output, shell_code, truncated, shell_exited=True)

    async def close(self) -> None:
        await self._process.dispose()

    def _on_exit(self) -> None:
        self._exited = True
        if self._call is not None:
            self._call.cancel()

    async def _send(self, data: bytes) -> None:
        # If the shell is gone, reading finds EOF and reports it.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self._process.send(data)

    async def _read_exited(self, marker: bytes, tail: OutputTail) -> tuple[int, int] | None:
        """The rest of the output of a shell that exited during a call: the end
        of its output does not say so when a job it started in the background
        holds the output open, and the call waited out its whole timeout and
        said the command timed out. Its group (those jobs) is killed, and its
        output read until it ends, for ``EXITED_DRAIN_SECONDS`` at most if
        something that left the group (``setsid``) still holds it. The marker,
        if the command ended before the shell did."""
        await self._process.kill()
        with anyio.move_on_after(EXITED_DRAIN_SECONDS):
            return await self._read_until(marker, tail)
        return None

    async def _read_until(self, marker: bytes, tail: OutputTail) -> tuple[int, int] | None:
        """(end of the command's output in ``tail.buffer``, exit code), or None at EOF."""
        needle = b"\n" + marker
        searched = 0  # absolute offset (including dropped bytes) already searched
        while True:
            try:
                chunk = await self._process.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return None
            tail.feed(chunk)
            # Back over what a marker cut by the chunk's end may have begun with.
            found = tail.buffer.find(needle, max(0, searched - tail.dropped - len(needle) - 4))
            while found >= 0:
                code = END_CODE.match(tail.buffer, found + len(needle))
                if code is not None:
                    return found, int(code.group(1))
                found = tail.buffer.find(needle, found + 1)
            searched = tail.dropped + len(tail.buffer)


def _frame(command: str, marker: str) -> bytes:
    if "\x00" in command:
        raise InvalidArgument("the command contains a NUL byte")
    quoted = command.replace("\\", "\\\\").replace("'", "\\'")
    split = f"{marker[:6]}''{marker[6:]}"
    # ``builtin``: a function the agent named printf does not end the framing.
    line = f"eval $'{quoted}' </dev/null >&2 2>&1\nbuiltin printf '\\n%s%d\\n' '{split}' \"$?\"\n"
    return line.encode("utf-8", errors="replace")
