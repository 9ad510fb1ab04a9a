"""``unsafe_local``: a sandbox that ISOLATES NOTHING.

!!! Commands run as the server's own user, on the server's own machine, with
!!! its network, its files and its processes in reach. The file tools are
!!! confined to the workspace directory; bash is not confined at all. The only
!!! protection is that the shell starts with a minimal environment instead of
!!! the server's (no API keys, no ``STEAD_*`` settings).

It exists for development and tests on machines without bubblewrap, and only
when asked for by name (DESIGN rule 7): nothing may fall back to it. The
workspace is a plain directory; the shell is a plain ``/bin/bash`` child in its
own session, so killing it kills the commands it started (except those that
start a session of their own).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import anyio
from anyio import to_thread

from stead.sandbox.base import (
    EXEC_OUTPUT_LIMIT,
    ExecResult,
    ExecStatus,
    FileInfo,
    GlobResult,
    GrepResult,
    Sandbox,
)
from stead.sandbox.errors import ExecInDoubt, InvalidArgument, SandboxUnavailable
from stead.sandbox.local import files, search
from stead.sandbox.local.oprecords import OpRecords
from stead.sandbox.local.paths import WorkspacePaths
from stead.sandbox.local.shell import OutputTail, Shell

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def shell_environment(workspace: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    """The shell's whole environment: a fixed minimal base plus ``extra``.
    Nothing is inherited from the server's own environment."""
    base = {"PATH": DEFAULT_PATH, "HOME": workspace, "LANG": "C.UTF-8", "TERM": "dumb"}
    return base | dict(extra or {})


class UnsafeLocalSandbox:
    """A workspace directory and a bash child process on this machine. See the
    module docstring: this backend is not a security boundary."""

    backend = "unsafe_local"

    def __init__(
        self, workspace: Path, state_dir: Path, env: Mapping[str, str] | None = None
    ) -> None:
        # realpath only reads: the shell reports the canonical path (``pwd``), so
        # that is the name paths are shown under. Directories are made on first use.
        self._paths = WorkspacePaths.open(workspace)
        self._state_dir = state_dir
        self._records = OpRecords(state_dir / "ops")
        self._env = shell_environment(self._paths.shown_as, env)
        self._ready = False
        self._shell: Shell | None = None
        self._lock = anyio.Lock()
        self._running: dict[str, anyio.Event] = {}
        self._closed = False

    @property
    def workspace_path(self) -> str:
        return self._paths.shown_as

    async def __aenter__(self) -> UnsafeLocalSandbox:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- exec -----------------------------------------------------------------

    async def exec(self, command: str, *, op_key: str, timeout: float) -> ExecResult:  # noqa: ASYNC109
        await self._open()
        if "\x00" in command:
            raise InvalidArgument("the command contains a NUL byte")
        if not timeout > 0:
            raise InvalidArgument(f"timeout must be positive, got {timeout}")
        if (running := self._running.get(op_key)) is not None:
            await running.wait()  # re-attach: same op key, already running here
            return await self.exec(command, op_key=op_key, timeout=timeout)
        done = self._running[op_key] = anyio.Event()
        try:
            status, recorded = await self._records.load(op_key)
            if recorded is not None:
                return recorded
            if status is ExecStatus.STARTED:
                raise ExecInDoubt(op_key)
            async with self._lock:
                return await self._run(command, op_key, time_limit=timeout)
        finally:
            del self._running[op_key]
            done.set()

    async def exec_status(self, op_key: str) -> ExecStatus:
        status, _ = await self._records.load(op_key)
        return status

    async def exec_result(self, op_key: str) -> ExecResult | None:
        _, result = await self._records.load(op_key)
        return result

    async def restart_shell(self) -> None:
        await self._open()
        async with self._lock:
            await self._drop_shell()
            await self._live_shell()

    async def close(self) -> None:
        self._closed = True
        await self._drop_shell()

    async def _run(self, command: str, op_key: str, *, time_limit: float) -> ExecResult:
        shell = await self._live_shell()
        tail = OutputTail(EXEC_OUTPUT_LIMIT)
        try:
            await self._records.mark_running(op_key)
            result = await shell.run(command, time_limit=time_limit, tail=tail)
        except BaseException:
            # Cancelled (or failed) mid-command: the shell's group is already
            # killed. Record that, so a recovering caller is not left in doubt.
            self._shell = None
            output, truncated = tail.text()
            interrupted = ExecResult(output, None, truncated, interrupted=True)
            # Failing to record must not replace the exception in flight (a
            # cancellation above all); unrecorded, the op key stays in doubt.
            with anyio.CancelScope(shield=True), contextlib.suppress(SandboxUnavailable):
                await shell.close()
                await self._records.mark_finished(op_key, interrupted)
            raise
        if self._closed and result.shell_exited:  # close() killed the shell under it
            result = ExecResult(result.output, None, result.truncated, interrupted=True)
        if result.shell_reset:
            self._shell = None
        await self._records.mark_finished(op_key, result)
        return result

    async def _live_shell(self) -> Shell:
        if self._shell is not None and self._shell.alive:
            return self._shell
        await self._drop_shell()
        self._check_open()
        shell = await Shell.start(self._paths.root, self._env)
        if self._closed:  # close() ran while the shell was starting
            await shell.close()
            self._check_open()
        self._shell = shell
        return shell

    async def _drop_shell(self) -> None:
        shell, self._shell = self._shell, None
        if shell is not None:
            await shell.close()

    # -- files ----------------------------------------------------------------

    async def stat(self, path: str) -> FileInfo:
        await self._open()
        return await to_thread.run_sync(files.stat_path, self._paths, path)

    async def read_file(self, path: str, *, max_bytes: int) -> bytes:
        await self._open()
        return await to_thread.run_sync(files.read_file, self._paths, path, max_bytes)

    async def read_lines(self, path: str, start: int, end: int, *, max_bytes: int) -> bytes:
        await self._open()
        return await to_thread.run_sync(files.read_lines, self._paths, path, start, end, max_bytes)

    async def write_file(self, path: str, data: bytes) -> None:
        await self._open()
        await to_thread.run_sync(files.write_file, self._paths, path, data)

    async def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        await self._open()
        return await search.glob(self._paths, pattern, path)

    async def grep(self, pattern: str, path: str | None = None) -> GrepResult:
        await self._open()
        return await search.grep(self._paths, pattern, path)

    # -- lifecycle --------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxUnavailable("the sandbox is closed")

    async def _open(self) -> None:
        self._check_open()
        if not self._ready:
            await to_thread.run_sync(self._make_directories)
            self._ready = True

    def _make_directories(self) -> None:
        os.makedirs(self._paths.root, exist_ok=True)
        os.makedirs(self._state_dir, mode=0o700, exist_ok=True)


def _implements_the_protocol(sandbox: UnsafeLocalSandbox) -> Sandbox:
    return sandbox  # mypy checks UnsafeLocalSandbox against Sandbox here
