"""A sandbox's commands (``HostedSandbox.exec``): at most once per op key
(DESIGN rule 5), in the sandbox's one shell, with the record of each kept in
the catalogue: ``running`` before the command starts, ``finished`` with its
result after. A second call under an op key that is running here waits for it
and returns its result; one the catalogue saw start but not finish is
``ExecInDoubt``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable
from dataclasses import asdict

import anyio
from anyio import to_thread

from stead.sandbox import (
    EXEC_OUTPUT_LIMIT,
    ExecInDoubt,
    ExecResult,
    ExecStatus,
    InvalidArgument,
    SandboxUnavailable,
)
from stead.sandbox.local.shell import BASH, OutputTail, Shell
from stead.sandbox_host.bwrap import BwrapBody
from stead.sandbox_host.catalogue import Catalogue
from stead.sandbox_host.cgroups import SandboxCgroup
from stead.sandbox_host.clock import HostClock

RUNNING = "running"
FINISHED = "finished"


NEW_SHELL = (
    "[stead: this command ran in a new shell (the sandbox slept, or its environment "
    "changed, since the last command): the working directory is /workspace again and "
    "exported variables are gone]\n"
)


class SandboxCommands:
    """Mixed into ``HostedSandbox``, which provides the state and the methods below."""

    id: str
    _catalogue: Catalogue
    _clock: HostClock
    _exec_lock: anyio.Lock
    _running: dict[str, anyio.Event]
    _body: BwrapBody | None
    _cgroup: SandboxCgroup | None
    _shell: Shell | None
    _shell_env: dict[str, str]
    _shell_lost: bool
    """A shell went without a result saying so (the body stopped: a sleep; the
    environment changed): the next command's output says it runs in a new one."""

    def activity(self, *, wake: bool = True) -> contextlib.AbstractAsyncContextManager[None]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        raise NotImplementedError

    async def exec(
        self,
        command: str,
        *,
        op_key: str,
        timeout: float,  # noqa: ASYNC109 - the command's own limit, a result
        on_output: Callable[[bytes], None] | None = None,
    ) -> ExecResult:
        """At most once per op key (rule 5). ``on_output`` sees the output as it
        arrives when this call runs the command (not when it re-attaches)."""
        if "\x00" in command:
            raise InvalidArgument("the command contains a NUL byte")
        if not timeout > 0:
            raise InvalidArgument(f"timeout must be positive, got {timeout}")
        if (running := self._running.get(op_key)) is not None:
            await running.wait()  # re-attach: the same op key is running here
            return await self.exec(command, op_key=op_key, timeout=timeout)
        done = self._running[op_key] = anyio.Event()
        try:
            status, recorded = await self.exec_record(op_key)
            if recorded is not None:
                return recorded
            if status is ExecStatus.STARTED:
                raise ExecInDoubt(op_key)
            async with self.activity(), self._exec_lock:
                return await self._run(command, op_key, time_limit=timeout, on_output=on_output)
        finally:
            del self._running[op_key]
            done.set()

    def exec_running(self, op_key: str) -> bool:
        return op_key in self._running

    def running_op_keys(self) -> list[str]:
        return list(self._running)

    async def exec_settled(self, op_key: str) -> None:
        """Returns once no exec under ``op_key`` is running here."""
        while (running := self._running.get(op_key)) is not None:
            await running.wait()

    async def exec_record(self, op_key: str) -> tuple[ExecStatus, ExecResult | None]:
        record = await self._catalogue.exec_record(self.id, op_key)
        if record is None:
            return ExecStatus.UNKNOWN, None
        state, result = record
        if state == FINISHED and result is not None:
            return ExecStatus.FINISHED, ExecResult(**json.loads(result))
        return ExecStatus.STARTED, None

    async def _run(
        self,
        command: str,
        op_key: str,
        *,
        time_limit: float,
        on_output: Callable[[bytes], None] | None,
    ) -> ExecResult:
        shell = await self._live_shell()
        fresh, self._shell_lost = self._shell_lost, False
        tail = OutputTail(EXEC_OUTPUT_LIMIT, on_output)
        oom_before = await self._oom_kills()
        try:
            await self._catalogue.put_exec(self.id, op_key, RUNNING, None, now=self._clock.time())
            result = await shell.run(command, time_limit=time_limit, tail=tail)
        except BaseException:
            self._shell = None
            output, truncated = tail.text()
            interrupted = ExecResult(output, None, truncated, interrupted=True)
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await shell.close()
                await self._record(op_key, interrupted)
            raise
        if result.shell_reset:
            self._shell = None
        if await self._oom_kills() > oom_before:
            note = "\n[stead: the sandbox ran out of memory; the kernel killed a process]"
            result = dataclasses.replace(result, output=result.output + note)
        if fresh:
            result = dataclasses.replace(result, output=NEW_SHELL + result.output)
        await self._record(op_key, result)
        return result

    async def _record(self, op_key: str, result: ExecResult) -> None:
        result_json = json.dumps(asdict(result))
        await self._catalogue.put_exec(
            self.id, op_key, FINISHED, result_json, now=self._clock.time()
        )

    async def _oom_kills(self) -> int:
        if self._cgroup is None:
            return 0
        with contextlib.suppress(OSError):
            return await to_thread.run_sync(self._cgroup.oom_kills)
        return 0

    async def _live_shell(self) -> Shell:
        env = self.environment()
        if self._shell is not None and self._shell.alive and self._shell_env == env:
            return self._shell
        body = self._require_body()
        if self._shell is not None:
            shell, self._shell = self._shell, None
            self._shell_lost = True  # the environment changed, or it died unreported
            await shell.close()
        process = await body.spawn(BASH, env)
        self._shell = Shell(process)
        self._shell_env = env
        return self._shell

    def _require_body(self) -> BwrapBody:
        if self._body is None or not self._body.alive:
            raise SandboxUnavailable("the sandbox stopped")
        return self._body

    async def restart_shell(self) -> None:
        async with self.activity(), self._exec_lock:
            shell, self._shell = self._shell, None
            if shell is not None:
                await shell.close()
            await self._live_shell()
            self._shell_lost = False  # asked for: the caller knows
