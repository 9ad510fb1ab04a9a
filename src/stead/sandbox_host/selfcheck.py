"""Can this machine isolate sandboxes? A real probe, run once when the host starts.

Rule 7 says isolation fails closed and says why, so the probe does what a
sandbox start does rather than guessing from versions: it runs bubblewrap as an
unprivileged uid in fresh namespaces, creates and removes a limited cgroup, and
makes, grows, mounts and removes a small disk (``disk.py``) in the work
directory.
Each problem names its fix, for the operator reading the host's log.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from stead.sandbox import IsolationUnavailable
from stead.sandbox_host.cgroups import CgroupLimits, Cgroups, detect_cgroups
from stead.sandbox_host.loop_mounts import (
    DiskError,
    grow_image,
    make_image,
    mount_image,
    unmount,
)

PROBE_SECONDS = 10.0
PROBE_LIMITS = CgroupLimits(memory_bytes=64 * 1024**2, pids=16, cpus=0.5)
PROBE_DISK_BYTES = 16 * 1024**2
PROBE_GROWN_BYTES = 20 * 1024**2
SYSCTLS = Path("/proc/sys")
STDERR_TAIL = 500
"""Characters of bubblewrap's complaint a problem quotes."""


@dataclass(frozen=True, slots=True)
class IsolationReport:
    ok: bool
    problems: list[str] = field(default_factory=list)
    """What stops isolation, each with its fix."""
    details: list[str] = field(default_factory=list)
    """What was found working, for the log."""

    def raise_if_unusable(self) -> None:
        if self.ok:
            return
        raise IsolationUnavailable(
            "sandbox isolation is not available on this machine: "
            + "; ".join(self.problems)
            + "; to fix: install bubblewrap (apt-get install bubblewrap) and run the sandbox "
            "host as root on a kernel that allows user namespaces and writable cgroups"
        )


def check_isolation(
    bwrap: str, *, probe_uid: int, cgroups: Cgroups | None = None, work_dir: Path | None = None
) -> IsolationReport:
    """``work_dir``: where the disk probe goes (None: no probe)."""
    problems: list[str] = []
    details: list[str] = []
    if os.geteuid() != 0:
        problems.append(
            "the sandbox host is not root, so it cannot run sandboxes as their own uids "
            "or create their cgroups"
        )
    _check_bwrap(bwrap, probe_uid, problems, details)
    _check_cgroups(cgroups, problems, details)
    if work_dir is not None:
        problem = check_disk(work_dir)
        if problem is None:
            details.append("sandbox disks: ext4 images on loop devices")
        else:
            problems.append(problem)
    return IsolationReport(not problems, problems, details)


def _check_bwrap(bwrap: str, probe_uid: int, problems: list[str], details: list[str]) -> None:
    found = shutil.which(bwrap)
    if found is None:
        problems.append(f"bubblewrap not found at {bwrap!r} (apt-get install bubblewrap)")
        return
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        problems.append("setpriv not found (apt-get install util-linux)")
        return
    argv = [setpriv, f"--reuid={probe_uid}", f"--regid={probe_uid}", "--clear-groups"]
    argv += [found, *_probe_bwrap_args()]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env={"PATH": "/usr/bin:/bin"},
            timeout=PROBE_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        problems.append(f"bubblewrap did not finish a trivial sandbox in {PROBE_SECONDS:g} s")
        return
    except OSError as exc:
        problems.append(f"cannot run {found}: {exc.strerror}")
        return
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[-STDERR_TAIL:] or "no message"
        problems.append(
            f"bubblewrap cannot create a sandbox as uid {probe_uid} (exit {done.returncode}: "
            f"{said}){_userns_hint()}"
        )
        return
    details.append(f"bubblewrap {found} runs as uid {probe_uid} in new namespaces")


def _probe_bwrap_args() -> list[str]:
    args = [
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    # Merged /usr (Debian 12) makes these symlinks; older layouts have directories.
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return [*args, "--proc", "/proc", "--dev", "/dev", "--", "/bin/true"]


def _userns_hint() -> str:
    """Why an unprivileged uid may not create a user namespace, from the sysctls
    that forbid it; empty when none of them does."""
    hints = []
    if _sysctl("kernel/unprivileged_userns_clone") == "0":
        hints.append("set kernel.unprivileged_userns_clone=1")
    if _sysctl("user/max_user_namespaces") == "0":
        hints.append("set user.max_user_namespaces to a positive number (e.g. 10000)")
    if _sysctl("kernel/apparmor_restrict_unprivileged_userns") == "1":
        hints.append(
            "AppArmor restricts unprivileged user namespaces: give bwrap a profile "
            "that allows userns, or set kernel.apparmor_restrict_unprivileged_userns=0"
        )
    return f"; {'; '.join(hints)}" if hints else ""


def _sysctl(name: str) -> str | None:
    try:
        return (SYSCTLS / name).read_text().strip()
    except OSError:
        return None


def _check_cgroups(cgroups: Cgroups | None, problems: list[str], details: list[str]) -> None:
    try:
        found = cgroups if cgroups is not None else detect_cgroups()
    except IsolationUnavailable as exc:
        problems.append(exc.reason)
        return
    try:
        probe = found.create(f"probe-{os.getpid()}", PROBE_LIMITS)
        try:
            probe.pids_current()
        finally:
            probe.destroy()
    except OSError as exc:
        problems.append(f"cannot create a limited cgroup with {found.describe()}: {exc}")
        return
    details.append(found.describe())


def check_disk(work_dir: Path) -> str | None:
    """Makes a small sandbox disk in ``work_dir``, grows it (as a disk made
    before the host's size was raised is), mounts it, writes to it and removes
    it; what stops it, if anything."""
    probe = work_dir / f"disk-probe-{os.getpid()}"
    image, target = probe / "disk.img", probe / "disk"
    for left in work_dir.glob("disk-probe-*"):  # a host killed during its check
        _remove_probe(left)
    try:
        target.mkdir(parents=True, mode=0o700, exist_ok=True)
        make_image(image, PROBE_DISK_BYTES)
        if not grow_image(image, PROBE_GROWN_BYTES):
            raise DiskError(errno.EIO, "resize2fs did not grow it")
        mount_image(image, target)
        try:
            (target / "probe").write_bytes(b"probe")
        finally:
            unmount(target)
    except (DiskError, OSError) as exc:
        return f"cannot give sandboxes a disk of their own (an ext4 image on a loop device): {exc}"
    finally:
        _remove_probe(probe)
    return None


def _remove_probe(probe: Path) -> None:
    with contextlib.suppress(DiskError):
        unmount(probe / "disk", lazy=True)
    shutil.rmtree(probe, ignore_errors=True)
