"""Two sandbox hosts on one machine, as a test run beside an operator's server
is: each claims its uid range in the machine's real registry, so their
sandboxes never share a uid, and a restarted host gets its range back."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from stead.sandbox import HostClient, HostSandbox, IsolationUnavailable
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import (
    WAIT,
    client_of,
    config,
    new_id,
    requires_isolation,
    workspace_on_host,
)

pytestmark = [pytest.mark.anyio, requires_isolation]


def processes_of(uid: int) -> set[int]:
    """Host pids whose real uid is ``uid``, read from /proc/<pid>/status."""
    found = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                status = Path(entry.path, "status").read_text()
                if _real_uid(status) == uid:
                    found.add(int(entry.name))
    return found


def sleepers_of(uid: int) -> set[int]:
    """The ``sleep 600`` processes among ``uid``'s: the ones the test started,
    which must live on (a sandbox's short-lived helpers come and go). Waits
    for one: on a busy machine the command may not have reached ``sleep`` yet."""
    deadline = time.monotonic() + WAIT
    while True:
        found = set()
        for pid in processes_of(uid):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\x00600"):
                    found.add(pid)
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def _real_uid(status: str) -> int:
    line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    return int(line.split()[1])


async def uids_of(client: HostClient) -> range:
    described = (await client.ping())["uids"]
    return range(described["base"], described["base"] + described["count"])


async def test_two_hosts_run_their_sandboxes_as_their_own_uids_and_keep_them_on_restart(
    tmp_path: Path, forker: ServeForker
) -> None:
    async with contextlib.AsyncExitStack() as stack:

        def start(state: Path, **env: str) -> HostProcess:
            process = HostProcess(state, env=env, forker=forker).start()
            stack.callback(process.stop)
            return process

        def connect(process: HostProcess) -> HostClient:
            client = client_of(process)
            stack.push_async_callback(client.aclose)
            return client

        a = start(tmp_path / "a" / "state")
        client_a = connect(a)
        on_a = HostSandbox(client_a, new_id(), config())
        await on_a.write_file("note", b"a")
        await on_a.start_process("sleep 600")
        uid_a = (await on_a.status())["uid"]
        range_a = await uids_of(client_a)
        running_a = sleepers_of(uid_a)
        assert uid_a in range_a and running_a

        b = start(tmp_path / "b" / "state")
        client_b = connect(b)
        on_b = HostSandbox(client_b, new_id(), config())
        await on_b.start_process("sleep 600")
        uid_b = (await on_b.status())["uid"]
        range_b = await uids_of(client_b)
        assert uid_b in range_b and not set(range_a) & set(range_b)
        assert processes_of(uid_b) and not processes_of(uid_b) & running_a
        assert sleepers_of(uid_a) == running_a  # the first host's sandbox ran on, untouched

        taker = start(tmp_path / "c" / "state", STEAD_SANDBOX_UID_BASE=str(range_a.start))
        with pytest.raises(IsolationUnavailable) as refused:
            await HostSandbox(connect(taker), new_id(), config()).acquire()
        assert f"{a.state_dir.resolve()} (pid {a.pid})" in str(refused.value)

        # A restart with a fresh work directory: the workspace comes back from
        # its snapshot, owned by the uid the sandbox had.
        assert await on_a.sleep()
        running_b = sleepers_of(uid_b)
        assert running_b
        a.stop()
        a = start(a.state_dir)
        client_a = connect(a)
        woken = HostSandbox(client_a, on_a.sandbox_id, config())
        assert await uids_of(client_a) == range_a
        listed = await woken.exec("stat -c %u note; id -u; cat note", op_key="w", timeout=10)
        inside, me, text = listed.output.split()
        assert inside == me and text == "a"
        assert (await woken.status())["uid"] == uid_a
        assert workspace_on_host(a, woken.sandbox_id).joinpath("note").stat().st_uid == uid_a
        assert sleepers_of(uid_b) == running_b
        await client_a.destroy(woken.sandbox_id)
        await client_b.destroy(on_b.sandbox_id)
