"""Child processes that each lead their own session, so one signal reaches every
process they start (a command's children, background jobs). A process that
calls ``setsid`` itself leaves the group; only a pid namespace (the isolating
backend) catches those.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import anyio
from anyio.abc import Process

REAP_SECONDS = 2.0
"""How long to wait for a killed process to be reaped before giving up on it."""


async def spawn(
    argv: Sequence[str],
    *,
    cwd: Path | None,
    env: Mapping[str, str],
    stderr_to_stdout: bool = False,
) -> Process:
    """Starts ``argv`` with piped stdin and stdout in a new session."""
    return await anyio.open_process(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if stderr_to_stdout else subprocess.DEVNULL,
        start_new_session=True,
    )


def kill_group(process: Process) -> None:
    """SIGKILLs the process's whole group at once (synchronous, never blocks).

    Also sent after the leader has exited: background jobs it left in the group
    die with it.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def dispose(process: Process) -> None:
    """Kills the group, closes the pipes and reaps the leader; never raises and
    finishes even when the caller is being cancelled."""
    kill_group(process)
    with anyio.CancelScope(shield=True), anyio.move_on_after(REAP_SECONDS):
        await process.aclose()


@contextlib.asynccontextmanager
async def group(
    argv: Sequence[str], *, cwd: Path | None, env: Mapping[str, str]
) -> AsyncIterator[Process]:
    """A process for the length of a block; its group is killed and reaped on exit."""
    process = await spawn(argv, cwd=cwd, env=env)
    try:
        yield process
    finally:
        await dispose(process)
