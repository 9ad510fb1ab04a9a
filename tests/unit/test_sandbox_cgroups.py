"""Sandbox cgroups and the isolation self-check, on the machine's real cgroups.

Needs root and a cgroup filesystem; skips otherwise. Every test works under a
parent directory of its own, so sweeping never touches anyone else's cgroups.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from stead.sandbox.errors import IsolationUnavailable
from stead.sandbox_host.cgroups import CgroupLimits, Cgroups, SandboxCgroup, detect_cgroups
from stead.sandbox_host.selfcheck import check_isolation

MIB = 1024**2
PROBE_UID = 1_999_998
"""Below every range a sandbox host claims (``stead.sandbox_host.uids``)."""
WAIT = 10.0

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups need root")


@pytest.fixture
def cgroups() -> Iterator[Cgroups]:
    parent = f"stead-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        found = detect_cgroups(parent=parent)
    except IsolationUnavailable as exc:
        pytest.skip(f"no usable cgroups: {exc.reason}")
    try:
        yield found
    finally:
        found.sweep_stale()
        for base in set(found.bases.values()):
            with contextlib.suppress(FileNotFoundError):
                base.rmdir()


@pytest.fixture
def make(cgroups: Cgroups) -> Iterator[list[SandboxCgroup]]:
    """Cgroups a test creates, destroyed however it ends."""
    made: list[SandboxCgroup] = []
    yield made
    for cgroup in made:
        cgroup.destroy()


def create(
    cgroups: Cgroups, made: list[SandboxCgroup], name: str, **limits: float
) -> SandboxCgroup:
    values = {"memory_bytes": 64 * MIB, "pids": 32, "cpus": 1.0, **limits}
    cgroup = cgroups.create(
        name, CgroupLimits(int(values["memory_bytes"]), int(values["pids"]), values["cpus"])
    )
    made.append(cgroup)
    return cgroup


@contextlib.contextmanager
def started_in(cgroup: SandboxCgroup, code: str) -> Iterator[subprocess.Popen[str]]:
    """A Python child that runs ``code`` only once it is in ``cgroup``, so everything
    it does is limited; killed and reaped on the way out."""
    gate = "import sys; sys.stdin.readline()\n"
    process = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", gate + code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        cgroup.add(process.pid)
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.communicate(timeout=WAIT)


def procs(cgroup: SandboxCgroup) -> list[str]:
    return [(path / "cgroup.procs").read_text() for path in cgroup.hierarchies]


def test_create_writes_the_limits(cgroups: Cgroups, make: list[SandboxCgroup]) -> None:
    cgroup = create(cgroups, make, "limits", memory_bytes=48 * MIB, pids=7, cpus=0.5)
    assert cgroups.version in (1, 2)
    assert cgroups.describe().startswith(f"cgroup v{cgroups.version} (memory, pids, cpu")
    memory, pids, cpu = cgroup.dirs["memory"], cgroup.dirs["pids"], cgroup.dirs["cpu"]
    assert (pids / "pids.max").read_text().strip() == "7"
    if cgroups.version == 1:
        assert int((memory / "memory.limit_in_bytes").read_text()) == 48 * MIB
        swap = memory / "memory.memsw.limit_in_bytes"
        if swap.exists():
            assert int(swap.read_text()) == 48 * MIB
        assert (cpu / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (cpu / "cpu.cfs_period_us").read_text().strip() == "100000"
    else:
        assert int((memory / "memory.max").read_text()) == 48 * MIB
        assert (cpu / "cpu.max").read_text().split() == ["50000", "100000"]
    assert cgroup.pids_current() == 0
    assert cgroup.oom_kills() == 0


def test_names_are_checked(cgroups: Cgroups) -> None:
    for bad in ("", "Upper", "a/b", "..", "a_b", "x" * 65):
        with pytest.raises(ValueError):
            cgroups.create(bad, CgroupLimits(64 * MIB, 8, 1.0))


def test_an_added_process_is_counted(cgroups: Cgroups, make: list[SandboxCgroup]) -> None:
    cgroup = create(cgroups, make, "count")
    # Touches a MiB once inside: v1 charges only memory used after joining.
    code = "data = bytes([1]) * 2**20; print('in', flush=True); sys.stdin.readline()"
    with started_in(cgroup, code) as process:
        assert process.stdout is not None
        assert process.stdout.readline() == "in\n"
        assert cgroup.pids_current() == 1
        assert all(text.split() == [str(process.pid)] for text in procs(cgroup))
        assert cgroup.memory_current() > 0
        assert cgroup.cpu_seconds() > 0.0


def test_the_pids_limit_stops_a_fork_loop(cgroups: Cgroups, make: list[SandboxCgroup]) -> None:
    limit = 8
    cgroup = create(cgroups, make, "forks", pids=limit)
    fork_loop = f"""
import os, time
made = failed = 0
for _ in range({limit * 4}):
    try:
        pid = os.fork()
    except BlockingIOError:
        failed += 1
        continue
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    made += 1
print(made, failed, flush=True)
sys.stdin.readline()
"""
    with started_in(cgroup, fork_loop) as process:
        assert process.stdout is not None
        made, failed = map(int, process.stdout.readline().split())
        assert cgroup.pids_current() == limit
        assert made == limit - 1
        assert failed == limit * 4 - made
        cgroup.kill_all()
        assert all(not text.split() for text in procs(cgroup))


def test_a_memory_hog_is_oom_killed(cgroups: Cgroups, make: list[SandboxCgroup]) -> None:
    cgroup = create(cgroups, make, "hog", memory_bytes=64 * MIB)
    hog = "chunks = [bytes([1]) * 2**20 for _ in range(200)]\nprint('survived', flush=True)\n"
    with started_in(cgroup, hog) as process:
        output, _ = process.communicate(timeout=60)
    assert output == ""
    assert process.returncode == -signal.SIGKILL
    assert cgroup.oom_kills() >= 1


def test_kill_all_empties_the_cgroup(cgroups: Cgroups, make: list[SandboxCgroup]) -> None:
    cgroup = create(cgroups, make, "kill")
    family = (
        "import subprocess\n"
        "children = [subprocess.Popen(['sleep', '600']) for _ in range(3)]\n"
        "print(' '.join(str(child.pid) for child in children), flush=True)\n"
        "sys.stdin.readline()\n"
    )
    with started_in(cgroup, family) as process:
        assert process.stdout is not None
        children = [int(pid) for pid in process.stdout.readline().split()]
        members = {int(pid) for text in procs(cgroup) for pid in text.split()}
        assert members == {process.pid, *children}
        cgroup.kill_all()
        assert all(not text.split() for text in procs(cgroup))
        assert process.wait(timeout=WAIT) == -signal.SIGKILL
        if "freezer" in cgroup.dirs:
            assert (cgroup.dirs["freezer"] / "freezer.state").read_text().strip() == "THAWED"
    cgroup.kill_all()  # an empty cgroup: nothing to do


def test_destroy_removes_every_directory(cgroups: Cgroups, make: list[SandboxCgroup]) -> None:
    cgroup = create(cgroups, make, "gone")
    with started_in(cgroup, "sys.stdin.readline()") as process:
        cgroup.destroy()
        assert process.wait(timeout=WAIT) == -signal.SIGKILL
    assert cgroup.hierarchies
    assert not any(path.exists() for path in cgroup.hierarchies)
    cgroup.destroy()  # idempotent
    with pytest.raises(OSError):
        cgroup.pids_current()


def test_create_replaces_a_leftover(cgroups: Cgroups, make: list[SandboxCgroup]) -> None:
    first = create(cgroups, make, "again", pids=5)
    with started_in(first, "sys.stdin.readline()") as process:
        second = create(cgroups, make, "again", pids=9)
        assert process.wait(timeout=WAIT) == -signal.SIGKILL
    assert second.dirs == first.dirs
    assert second.pids_current() == 0
    assert (second.dirs["pids"] / "pids.max").read_text().strip() == "9"


def test_sweep_stale_removes_all_but_the_kept(cgroups: Cgroups, make: list[SandboxCgroup]) -> None:
    kept = create(cgroups, make, "sbx-1")
    stale = [create(cgroups, make, name) for name in ("sbx-2", "pkg-3")]
    with started_in(stale[0], "sys.stdin.readline()") as process:
        assert cgroups.sweep_stale(keep=["sbx-1"]) == ["pkg-3", "sbx-2"]
        assert process.wait(timeout=WAIT) == -signal.SIGKILL
    assert all(path.is_dir() for path in kept.hierarchies)
    assert not any(path.exists() for cgroup in stale for path in cgroup.hierarchies)
    assert cgroups.sweep_stale(keep=["sbx-1"]) == []


def test_detect_names_a_missing_hierarchy(tmp_path: Path) -> None:
    membership = tmp_path / "cgroup"
    membership.write_text("4:memory:/\n0::/\n")
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "cgroup.procs").write_text("")
    with pytest.raises(IsolationUnavailable, match="pids, cpu"):
        detect_cgroups(tmp_path, proc_self_cgroup=membership)


def test_detect_v2_refuses_a_cgroup_that_holds_the_host(tmp_path: Path) -> None:
    # A fake v2 tree: the host's unit is not delegated, so sandboxes would have to
    # go above it and escape its limits.
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    (tmp_path / "system.slice" / "stead.service").mkdir(parents=True)
    membership = tmp_path / "cgroup"
    membership.write_text("0::/system.slice/stead.service\n")
    with pytest.raises(IsolationUnavailable, match="delegated"):
        detect_cgroups(tmp_path, proc_self_cgroup=membership)
    assert not (tmp_path / "system.slice" / "stead").exists()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_self_check_passes_here(cgroups: Cgroups) -> None:
    report = check_isolation(shutil.which("bwrap") or "bwrap", probe_uid=PROBE_UID, cgroups=cgroups)
    assert report.problems == []
    assert report.ok
    report.raise_if_unusable()
    assert any("cgroup v" in detail for detail in report.details)
    assert cgroups.sweep_stale() == []  # the probe cgroup is gone


def test_the_self_check_names_a_missing_bwrap(cgroups: Cgroups) -> None:
    report = check_isolation("/nonexistent/bwrap", probe_uid=PROBE_UID, cgroups=cgroups)
    assert not report.ok
    assert report.problems == [
        "bubblewrap not found at '/nonexistent/bwrap' (apt-get install bubblewrap)"
    ]
    with pytest.raises(IsolationUnavailable) as raised:
        report.raise_if_unusable()
    assert str(raised.value).startswith("sandbox isolation is not available on this machine: ")
    assert "apt-get install bubblewrap" in str(raised.value)
