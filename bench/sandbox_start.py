"""Sandbox cold start: a whole isolated body, against a bare ``bwrap true``.

What is measured: the wall time from nothing to a sandbox body that answers,
as the sandbox host wakes one: mount the sandbox's disk (``disk.py``, an ext4
image of the host's default size made before) and make its ``/tmp`` empty,
create its cgroup with limits, start bubblewrap in new user, pid, mount, ipc,
uts, net and cgroup namespaces as the sandbox's own uid, and wait until the
supervisor inside reports ready; then tear it down and unmount (not timed).
The same body on a plain directory, with no disk, is timed too, alternating,
so the disk's own cost shows. A new sandbox's first start also takes its
disk from the host's spares (a rename) or, with none left, makes it (mkfs):
both are timed apart. The baseline is ``bwrap`` with the same
namespaces and read-only system mounts running ``/bin/true`` to completion,
started with ``subprocess.run``: the least any bubblewrap sandbox costs on
this machine. All alternate, after a warm-up. DESIGN budget: stead's p50 (with
its disk) at most 30 ms.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from anyio import to_thread

from stead.sandbox_host.bwrap import BodySpec, install_supervisor, run_body
from stead.sandbox_host.cgroups import CgroupLimits, Cgroups, detect_cgroups
from stead.sandbox_host.config import DISK_BYTES
from stead.sandbox_host.disk import SandboxDisk, SpareDisks

# isort: split
from _common import median, ms, percentile, size, verdict
from _sandbox import require_root

ROUNDS = size("ROUNDS", 40, 3)
UID = 2_999_000
BUDGET_S = 0.030
LIMITS = CgroupLimits(256 * 1024**2, 128, 1.0)
BARE = [
    "bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
    "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
    "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "/bin/true",
]  # fmt: skip


def bare_once() -> float:
    start = time.perf_counter()
    subprocess.run(
        ["setpriv", f"--reuid={UID}", f"--regid={UID}", "--clear-groups", *BARE], check=True
    )
    return time.perf_counter() - start


def prepare() -> tuple[Path, BodySpec, SandboxDisk]:
    work = Path(tempfile.mkdtemp(prefix="stead-bench-", dir="/tmp"))
    os.chmod(work, 0o711)
    workspace = work / "workspace"
    workspace.mkdir()
    os.chown(workspace, UID, UID)
    lib = work / "lib"
    lib.mkdir()
    install_supervisor(lib)
    disk = SandboxDisk(work / "sandbox", DISK_BYTES, UID)
    return work, BodySpec(uid=UID, workspace=workspace, lib_dir=lib), disk


async def start_once(spec: BodySpec, cgroups: Cgroups, disk: SandboxDisk | None) -> float:
    """One start, timed until the body answers; torn down untimed."""
    start = time.perf_counter()
    if disk is not None:
        await disk.acquire()
        await to_thread.run_sync(disk.fresh_tmp)
        if not disk.workspace.exists():
            disk.workspace.mkdir()
            os.chown(disk.workspace, UID, UID)
        spec = dataclasses.replace(spec, workspace=disk.workspace, tmp_dir=disk.tmp)
    cgroup = cgroups.create("bench", LIMITS)
    async with run_body(spec, cgroup):
        took = time.perf_counter() - start
    cgroup.destroy()
    if disk is not None:
        await disk.release()
    return took


async def made_once(work: Path, spares: SpareDisks | None) -> float:
    """A new sandbox's disk: taken from the spares (made before, untimed), or
    made (mkfs), and mounted, timed; then removed."""
    if spares is not None:
        await to_thread.run_sync(spares.fill)
    disk = SandboxDisk(work / "new", DISK_BYTES, UID, spares=spares)
    start = time.perf_counter()
    await disk.acquire()
    took = time.perf_counter() - start
    await disk.release()
    await disk.remove()
    disk.restore()
    return took


async def main() -> None:
    require_root()
    work, spec, disk = prepare()
    cgroups = detect_cgroups(parent="stead-bench")
    stead: list[float] = []
    plain: list[float] = []
    made: list[float] = []
    spared: list[float] = []
    bare: list[float] = []
    spares = SpareDisks(work / "spares", DISK_BYTES, count=1)
    try:
        for round_ in range(ROUNDS + 3):
            # Which goes first alternates: each follows the other's teardown in turn.
            if round_ % 2:
                took = await start_once(spec, cgroups, disk)
                without = await start_once(spec, cgroups, None)
            else:
                without = await start_once(spec, cgroups, None)
                took = await start_once(spec, cgroups, disk)
            baseline = bare_once()
            new = await made_once(work, spares)
            mkfs = await made_once(work, None) if round_ % 4 == 0 else None
            if round_ >= 3:
                stead.append(took)
                plain.append(without)
                bare.append(baseline)
                spared.append(new)
                made += [mkfs] if mkfs is not None else []
    finally:
        await disk.remove()
        cgroups.release()
        shutil.rmtree(work, ignore_errors=True)
    p50, base = median(stead), median(bare)
    p90 = percentile(stead, 90)
    print(
        f"stead cold start p50 {ms(p50)} p90 {ms(p90)} (without a disk {ms(median(plain))});"
        f" a new sandbox's disk mounted {ms(median(spared))} (made then, with no spare:"
        f" {ms(median(made))}); bare bwrap true {ms(base)}"
    )
    print(
        f"sandbox_start: p50 {ms(p50)} vs bare bwrap {ms(base)} ({p50 / base:.2f}x),"
        f" budget 30ms {verdict(p50 <= BUDGET_S)}"
    )


if __name__ == "__main__":
    sys.exit(anyio.run(main))
