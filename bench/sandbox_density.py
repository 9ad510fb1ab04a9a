"""Density: 50 awake, idle sandboxes on this machine, memory per sandbox.

What is measured: 50 sandboxes are woken (each runs one command, so its body
and persistent shell exist), then left idle. Memory is the proportional set
size (PSS, from ``/proc/<pid>/smaps_rollup``, so pages shared between
sandboxes count once in total) of every process the sandbox host started
(bwrap, the supervisor, the shell, the egress forwarder's thread lives in the
supervisor), plus what the sandbox host process itself grew by; divided by 50.
The baseline is one idle ``bash`` started with ``subprocess`` in the benchmark
process: the least a shell an agent can type into costs, with no isolation.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio

from stead.sandbox import HostSandbox

# isort: split
from _common import size
from _sandbox import bench_config, client_of, sandbox_host

SANDBOXES = size("SANDBOXES", 50, 3)


def pss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def bash_baseline() -> float:
    shell = subprocess.Popen(["bash"], stdin=subprocess.PIPE)
    try:
        time.sleep(0.5)
        return pss_kib(shell.pid) / 1024
    finally:
        shell.kill()
        shell.wait()


async def wake(sandbox: HostSandbox) -> None:
    result = await sandbox.exec("true", op_key="wake", timeout=60)
    assert result.exit_code == 0, result


async def main() -> None:
    with sandbox_host() as host:
        client = client_of(host)
        host_before = pss_kib(host.pid)
        sandboxes = [HostSandbox(client, f"bench-{n}", bench_config()) for n in range(SANDBOXES)]
        try:
            started = time.perf_counter()
            async with anyio.create_task_group() as tasks:
                for sandbox in sandboxes:
                    tasks.start_soon(wake, sandbox)
            woke = time.perf_counter() - started
            await anyio.sleep(1.0)  # idle: let the shells and the host settle
            inside = sum(pss_kib(pid) for pid in descendants(host.pid)) / 1024
            grown = max(0, pss_kib(host.pid) - host_before) / 1024
        finally:
            async with anyio.create_task_group() as tasks:
                for sandbox in sandboxes:
                    tasks.start_soon(client.destroy, sandbox.sandbox_id)
            await client.aclose()
    per = (inside + grown) / SANDBOXES
    bash = bash_baseline()
    print(
        f"{SANDBOXES} sandboxes woke in {woke:.1f}s; processes {inside:.1f} MiB PSS,"
        f" host grew {grown:.1f} MiB; idle bash {bash:.2f} MiB"
    )
    print(
        f"sandbox_density: {per:.2f} MiB per idle sandbox vs idle bash {bash:.2f} MiB"
        f" ({per / bash:.1f}x)"
    )


if __name__ == "__main__":
    sys.exit(anyio.run(main))
