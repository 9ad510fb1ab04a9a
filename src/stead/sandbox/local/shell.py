"""A persistent bash process that runs one command at a time.

Framing: each command goes to bash's stdin as ``eval $'<command>' </dev/null``
followed by a ``printf`` of a per-call marker and ``$?``. The command is quoted
as one ANSI-C string, so a syntax error in it (an unbalanced quote) is reported
by ``eval`` instead of swallowing the framing; stdin is ``/dev/null`` so a
command that reads input gets EOF instead of the next command. The marker is
split by quotes in what bash reads, so echoing the input (``set -v``) cannot
fake it, and it only counts when printed as ``\\n<marker><digits>\\n``.

The shell leads its own session; a timeout, a cancellation or the shell's own
exit kills the whole group, and the owner starts a fresh shell next time.
Not safe for concurrent use: the owner runs one command at a time.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import anyio
from anyio.abc import Process

from stead.sandbox.base import ExecResult
from stead.sandbox.errors import InvalidArgument, SandboxUnavailable
from stead.sandbox.local.processes import dispose, spawn

BASH = ("/bin/bash", "--noprofile", "--norc")
READ_CHUNK = 64 * 1024


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

    async def dispose(self) -> None:
        """Kills the process group and reaps; never raises, survives cancellation."""
        ...


class LocalShellProcess:
    """A shell that is a plain child of this process (``unsafe_local``)."""

    def __init__(self, process: Process) -> None:
        self._process = process

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

    async def dispose(self) -> None:
        await dispose(self._process)


class Shell:
    def __init__(self, process: ShellProcess) -> None:
        self._process = process

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
        try:
            with anyio.move_on_after(time_limit) as deadline:
                await self._send(framed)
                code = await self._read_until(marker.encode(), tail)
        except BaseException:
            await self._process.dispose()
            raise
        if deadline.cancelled_caught:
            await self._process.dispose()
            output, truncated = tail.text()
            return ExecResult(output, None, truncated, timed_out=True)
        if code is None:  # the shell ended before the marker
            await self._process.dispose()
            output, truncated = tail.text()
            status = self._process.returncode
            exit_code = status if status is None or status >= 0 else 128 - status
            return ExecResult(output, exit_code, truncated, shell_exited=True)
        end, exit_code = code
        output, truncated = tail.text(end)
        return ExecResult(output, exit_code, truncated)

    async def close(self) -> None:
        await self._process.dispose()

    async def _send(self, data: bytes) -> None:
        # If the shell is gone, reading finds EOF and reports it.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self._process.send(data)

    async def _read_until(self, marker: bytes, tail: OutputTail) -> tuple[int, int] | None:
        """(end of the command's output in ``tail.buffer``, exit code), or None at EOF."""
        pattern = re.compile(rb"\n" + re.escape(marker) + rb"(\d{1,3})\n")
        searched = 0  # absolute offset (including dropped bytes) already searched
        while True:
            try:
                chunk = await self._process.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return None
            tail.feed(chunk)
            start = max(0, searched - tail.dropped - len(marker) - 8)
            found = pattern.search(tail.buffer, start)
            if found is not None:
                return found.start(), int(found.group(1))
            searched = tail.dropped + len(tail.buffer)


def _frame(command: str, marker: str) -> bytes:
    if "\x00" in command:
        raise InvalidArgument("the command contains a NUL byte")
    quoted = command.replace("\\", "\\\\").replace("'", "\\'")
    split = f"{marker[:6]}''{marker[6:]}"
    line = f"eval $'{quoted}' </dev/null\nprintf '\\n%s%d\\n' '{split}' \"$?\"\n"
    return line.encode("utf-8", errors="replace")
