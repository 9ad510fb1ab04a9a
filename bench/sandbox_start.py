"""Sandbox cold start: a whole isolated body, against a bare ``bwrap true``.

What is measured: the wall time from nothing to a sandbox body that answers,
as the sandbox host wakes one: create its cgroup with limits, start bubblewrap
in new user, pid, mount, ipc, uts, net and cgroup namespaces as the sandbox's
own uid, and wait until the supervisor inside reports ready; then tear it
down (not timed). The baseline is ``bwrap`` with the same namespaces and
read-only system mounts running ``/bin/true`` to completion, started with
``subprocess.run``: the least any bubblewrap sandbox costs on this machine.
Both alternate, after a warm-up. DESIGN budget: stead's p50 at most 30 ms.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

from stead.sandbox_host.bwrap import BodySpec, install_supervisor, run_body
from stead.sandbox_host.cgroups import CgroupLimits, detect_cgroups

# isort: split
from _common import median, ms, percentile, size, verdict
from _sandbox import require_root

ROUNDS = size("ROUNDS", 40, 3)
UID = 2_999_000
BUDGET_S = 0.030
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


def prepare() -> tuple[Path, BodySpec]:
    work = Path(tempfile.mkdtemp(prefix="stead-bench-", dir="/tmp"))
    os.chmod(work, 0o711)
    workspace = work / "workspace"
    workspace.mkdir()
    os.chown(workspace, UID, UID)
    lib = work / "lib"
    lib.mkdir()
    install_supervisor(lib)
    return work, BodySpec(uid=UID, workspace=workspace, lib_dir=lib)


async def main() -> None:
    require_root()
    work, spec = prepare()
    cgroups = detect_cgroups(parent="stead-bench")
    limits = CgroupLimits(256 * 1024**2, 128, 1.0)
    stead: list[float] = []
    bare: list[float] = []
    try:
        for round_ in range(ROUNDS + 3):
            start = time.perf_counter()
            cgroup = cgroups.create("bench", limits)
            async with run_body(spec, cgroup):
                took = time.perf_counter() - start
            cgroup.destroy()
            baseline = bare_once()
            if round_ >= 3:
                stead.append(took)
                bare.append(baseline)
    finally:
        cgroups.release()
        shutil.rmtree(work, ignore_errors=True)
    p50, base = median(stead), median(bare)
    p90 = percentile(stead, 90)
    print(f"stead cold start p50 {ms(p50)} p90 {ms(p90)}; bare bwrap true {ms(base)}")
    print(
        f"sandbox_start: p50 {ms(p50)} vs bare bwrap {ms(base)} ({p50 / base:.2f}x),"
        f" budget 30ms {verdict(p50 <= BUDGET_S)}"
    )


if __name__ == "__main__":
    sys.exit(anyio.run(main))
