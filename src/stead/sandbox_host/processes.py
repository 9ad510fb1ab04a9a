"""Processes started in a sandbox that outlive the call that started them:
background commands, and terminals (an exec or a PTY a client attaches to,
rule 10).

Each keeps its output in an ``OutputRing`` (1 MiB scrollback, stdout and
stderr tagged), filled by pump tasks that the host's task group owns. While
clients are attached, the pumps read no faster than the fastest of them takes
output (it may lag half the ring): a terminal runs at its fastest reader's
pace, like a real one, and a slower reader is dropped, never waited for. A pump
ends when its stream closes, which happens when the process exits or the body
stops, so no pump outlives its sandbox. The exit code is known only once
every pump has drained, so a reader that sees the exit has seen all output.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import secrets
import struct
import termios
import time
from typing import Any

import anyio
from anyio.abc import TaskGroup

from stead.sandbox import InvalidArgument, SandboxUnavailable
from stead.sandbox_host.bwrap import SandboxedProcess
from stead.sandbox_host.ring import STDERR, STDOUT, OutputRing
from stead.sandbox_host.supervisor_channel import FdStream

READ_CHUNK = 65536


class Kind(enum.StrEnum):
    BACKGROUND = "background"
    """Started by a ``start_process`` call; stderr merged into stdout."""
    EXEC = "exec"
    """A command a terminal client watches; stdout and stderr apart."""
    PTY = "pty"
    """A shell on a pseudo-terminal."""


class BackgroundProcess:
    def __init__(
        self, process: SandboxedProcess, command: str, name: str | None, kind: Kind, id: str
    ) -> None:
        self.id = id
        self.process = process
        self.command = command
        self.name = name
        self.kind = kind
        self.ring = OutputRing()
        self.started_at = time.time()
        self.exit_code: int | None = None
        self.exited = anyio.Event()
        self.attached = 0
        """Terminal clients attached right now (activity, rule 6)."""
        self._readers: dict[int, int] = {}
        """Attached client -> offset it has been sent up to."""
        self._moved = anyio.Event()

    @classmethod
    def start(
        cls,
        process: SandboxedProcess,
        command: str,
        name: str | None,
        tasks: TaskGroup,
        *,
        kind: Kind = Kind.BACKGROUND,
        id: str | None = None,
    ) -> BackgroundProcess:
        started = cls(process, command, name, kind, id or f"proc_{secrets.token_hex(8)}")
        tasks.start_soon(started._run, name=f"pumps of {started.id}")
        return started

    @property
    def running(self) -> bool:
        return not self.exited.is_set()

    async def _run(self) -> None:
        try:
            async with anyio.create_task_group() as pumps:
                if self.process.stdout is not None:
                    pumps.start_soon(self._pump, self.process.stdout, STDOUT)
                if self.process.stderr is not None:
                    pumps.start_soon(self._pump, self.process.stderr, STDERR)
            # Until it exits, or its sandbox stops (None): a process may close
            # its output and go on. Given up on 5 s after its output closed,
            # it counted as exited, with no exit code, while it still ran:
            # its terminal clients were closed with no exit code, and redialled
            # until they gave up.
            self.exit_code = await self.process.wait()
        finally:
            self.process.close_streams()
            self.exited.set()
            self.ring.close()

    def reader_at(self, reader: int, offset: int | None) -> None:
        """Where an attached client is (None: it left)."""
        if offset is None:
            self._readers.pop(reader, None)
        else:
            self._readers[reader] = offset
        self._moved.set()
        self._moved = anyio.Event()

    async def _room(self) -> None:
        lag = self.ring.capacity // 2
        while self._readers and max(self._readers.values()) < self.ring.end - lag:
            await self._moved.wait()

    async def _pump(self, stream: FdStream, channel: int) -> None:
        while True:
            await self._room()
            try:
                data = await stream.receive(READ_CHUNK)
            except (anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                return
            if not data:
                return
            self.ring.write(data, channel)

    async def write(self, data: bytes) -> None:
        """Input for the process (a terminal's keystrokes); none at all ends an
        exec's input (its stdin closes: end of file). A PTY's ends with the
        end-of-file key its shell reads (^D)."""
        if self.process.stdin is None or not self.running:
            raise InvalidArgument(f"process {self.id} takes no input")
        if not data:
            if self.kind is Kind.EXEC:
                self.process.stdin.close()
            return
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await self.process.stdin.send(data)

    def resize(self, rows: int, cols: int) -> None:
        if self.kind is not Kind.PTY or self.process.stdout is None:
            raise InvalidArgument(f"process {self.id} has no terminal to resize")
        check_size(rows, cols)
        fd = self.process.stdout.fd
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    async def signal(self, signum: int) -> None:
        if not self.running:
            return
        with contextlib.suppress(SandboxUnavailable):
            await self.process.signal(signum)

    def forget(self) -> None:
        """The body stopped (sleep or destroy): the process is gone with it."""
        self.process.close_streams()

    def describe(self) -> dict[str, Any]:
        output, start = self.ring.read()
        return {
            "id": self.id,
            "kind": self.kind.value,
            "name": self.name,
            "command": self.command,
            "pid": self.process.pid,
            "started_at": self.started_at,
            "running": self.running,
            "exit_code": self.exit_code,
            "attached": self.attached,
            "output_tail": output[-4096:].decode(errors="replace"),
            "output_bytes": self.ring.end,
            "output_dropped": start,
        }


def check_size(rows: int, cols: int) -> None:
    if not (0 < rows < 10000 and 0 < cols < 10000):
        raise InvalidArgument(f"rows and cols: {rows}x{cols} is not a terminal size")


def check_terminal_id(terminal_id: str) -> None:
    if not (
        0 < len(terminal_id) <= 100
        and terminal_id.isascii()
        and all(c.isalnum() or c in "_-" for c in terminal_id)
    ):
        raise InvalidArgument(
            f"terminal_id: {terminal_id!r} is not 1-100 letters, digits, '_' or '-'"
        )
