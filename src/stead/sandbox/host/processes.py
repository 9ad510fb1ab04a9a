"""Processes started in a sandbox that outlive the call that started them:
background commands now, terminals later (rule 10).

Each keeps its output in an ``OutputRing`` (1 MiB scrollback), filled by a
pump task that the host's task group owns. The pump ends when the process's
output closes, which happens when the process exits or the body stops, so no
pump outlives its sandbox.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Any

import anyio
from anyio.abc import TaskGroup

from stead.sandbox.backends.bwrap import SandboxedProcess
from stead.sandbox.errors import SandboxUnavailable
from stead.sandbox.host.ring import OutputRing

READ_CHUNK = 65536


class BackgroundProcess:
    def __init__(self, process: SandboxedProcess, command: str, name: str | None) -> None:
        self.id = f"proc_{secrets.token_hex(8)}"
        self.process = process
        self.command = command
        self.name = name
        self.ring = OutputRing()
        self.started_at = time.time()
        self.exit_code: int | None = None
        self.exited = anyio.Event()

    @classmethod
    def start(
        cls, process: SandboxedProcess, command: str, name: str | None, tasks: TaskGroup
    ) -> BackgroundProcess:
        background = cls(process, command, name)
        tasks.start_soon(background._pump, name=f"pump {background.id}")
        return background

    @property
    def running(self) -> bool:
        return not self.exited.is_set()

    async def _pump(self) -> None:
        try:
            while True:
                try:
                    data = await self.process.receive(READ_CHUNK)
                except (anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                    break
                if not data:
                    break
                self.ring.write(data)
            with anyio.move_on_after(5.0):
                self.exit_code = await self.process.wait()
        finally:
            self.ring.close()
            self.process.close_streams()
            self.exited.set()

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
            "name": self.name,
            "command": self.command,
            "pid": self.process.pid,
            "started_at": self.started_at,
            "running": self.running,
            "exit_code": self.exit_code,
            "output_tail": output[-4096:].decode(errors="replace"),
            "output_bytes": self.ring.end,
            "output_dropped": start,
        }
