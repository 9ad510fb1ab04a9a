"""Cgroups for sandboxes: one per sandbox, limiting memory, pids and cpu (rule 7).

A sandbox's cgroup is ``<parent>/<name>``; ``<parent>`` (``stead``) sits in the
cgroup the host runs in, so sandboxes stay within the limits the operator gave
the host, and ``sweep_stale`` after a crash finds exactly our leftovers.

cgroup v1 (a hierarchy per controller, e.g. Debian's hybrid layout): the parent
is made under this process's cgroup in each of memory, pids, cpu (required),
cpuacct and freezer (used when present). Memory+swap gets the memory limit so
swap cannot dodge it; the freezer stops forks while ``kill_all`` kills.

cgroup v2 (``<root>/cgroup.controllers`` exists) forbids processes in a cgroup
whose controllers are enabled for children ("no internal processes"), and the
host's own cgroup holds the host. So the parent goes only where that is safe,
and otherwise detection fails and says why:

* the host is in the mount's root: ``<root>/stead`` (the real root has no limits
  to escape; a container's namespace root must then hold no processes);
* the host's cgroup lies in a delegated one (systemd ``Delegate=yes`` with
  ``DelegateSubgroup=``, marked by the ``trusted.delegate`` xattr) or directly in
  a cgroup namespace's root: ``<that cgroup>/stead``, beside the host;
* anything else: ``IsolationUnavailable``, never a slice above the host's unit,
  whose limits would then no longer hold.

The v2 code follows the kernel's cgroup-v2 documentation but no test exercises
it (the test machines are v1). Every call blocks on the cgroup filesystem;
callers run it in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from stead.sandbox import IsolationUnavailable

log = logging.getLogger("stead.sandbox.host")

NAME = re.compile(r"[a-z0-9-]{1,64}")
PARENT = "stead"
REQUIRED = ("memory", "pids", "cpu")
V1_OPTIONAL = ("cpuacct", "freezer")
CPU_PERIOD_US = 100_000
CPU_MIN_QUOTA_US = 1_000
"""The kernel refuses a smaller quota."""
KILL_SECONDS = 5.0
FREEZE_SECONDS = 1.0
"""A task in uninterruptible sleep can hold a cgroup in FREEZING; kill anyway after this."""
POLL_SECONDS = 0.01
FIRST_POLL_SECONDS = 0.0002
"""Killed tasks usually leave within a millisecond: polls start this short and
double up to ``POLL_SECONDS``, so a sandbox's teardown waits for its tasks, not
for a fixed tick."""


@dataclass(frozen=True, slots=True)
class CgroupLimits:
    memory_bytes: int
    pids: int
    cpus: float
    """1.0 is one core."""

    def __post_init__(self) -> None:
        if self.memory_bytes <= 0 or self.pids <= 0 or self.cpus <= 0:
            raise ValueError(f"cgroup limits must be positive: {self}")


class SandboxCgroup:
    """One sandbox's cgroup: a directory per hierarchy (one on v2)."""

    def __init__(self, name: str, version: int, dirs: Mapping[str, Path]) -> None:
        self.name = name
        self.version = version
        self.dirs: Mapping[str, Path] = dict(dirs)
        """Controller -> this cgroup's directory; co-mounted controllers share one."""

    @property
    def hierarchies(self) -> list[Path]:
        return list(dict.fromkeys(self.dirs.values()))

    def add(self, pid: int) -> None:
        for directory in self.hierarchies:
            _write(directory / "cgroup.procs", str(pid))

    def pids_current(self) -> int:
        return int(_read(self.dirs["pids"] / "pids.current"))

    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        # v1 kernels before 4.13 have no oom_kill line: no count to give.
        return _keyed(self.dirs["memory"] / name).get("oom_kill", 0)

    def cpu_seconds(self) -> float:
        cpuacct = self.dirs.get("cpuacct")
        if cpuacct is not None:
            return int(_read(cpuacct / "cpuacct.usage")) / 1e9
        usage = _keyed(self.dirs["cpu"] / "cpu.stat").get("usage_usec")
        return 0.0 if usage is None else usage / 1e6

    def memory_current(self) -> int:
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        return int(_read(self.dirs["memory"] / name))

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup and below; return once none is left.

        Raises OSError if some survive ``KILL_SECONDS`` (a task stuck in the kernel).
        """
        deadline = time.monotonic() + KILL_SECONDS
        kill_file = self.dirs["memory"] / "cgroup.kill"
        if self.version == 2 and kill_file.exists():
            with contextlib.suppress(FileNotFoundError):
                _write(kill_file, "1")
        else:
            self._freeze_and_kill(deadline)
        # Catches whatever forked before the freeze or cgroup.kill took hold, and
        # processes a partial add() left in some hierarchies only.
        pause = FIRST_POLL_SECONDS
        while pids := self._members():
            if time.monotonic() >= deadline:
                raise OSError(
                    errno.EBUSY,
                    f"cgroup {self.name}: {len(pids)} process(es) survived SIGKILL",
                )
            _sigkill(pids)
            pause = _pause(pause)

    def destroy(self) -> None:
        self.kill_all()
        deadline = time.monotonic() + KILL_SECONDS
        for directory in self.hierarchies:
            _remove_tree(directory, deadline)

    def _freeze_and_kill(self, deadline: float) -> None:
        freezer = self.dirs.get("freezer")
        state = None if freezer is None else freezer / "freezer.state"
        if state is None or not state.exists():
            return
        try:
            _write(state, "FROZEN")
            until = min(deadline, time.monotonic() + FREEZE_SECONDS)
            pause = FIRST_POLL_SECONDS
            while _read(state) != "FROZEN" and time.monotonic() < until:
                pause = _pause(pause)
            # Frozen tasks cannot fork, so this one pass sees them all; the kill
            # lands when they thaw.
            _sigkill(self._members())
        except FileNotFoundError:
            return
        finally:
            with contextlib.suppress(FileNotFoundError):
                _write(state, "THAWED")

    def _members(self) -> set[int]:
        pids: set[int] = set()
        for top in self.hierarchies:
            for directory, _, _ in os.walk(top):
                with contextlib.suppress(FileNotFoundError):
                    pids.update(
                        int(line) for line in _read(Path(directory) / "cgroup.procs").split()
                    )
        return pids


class Cgroups:
    """Where this host makes sandbox cgroups, found by ``detect_cgroups``."""

    def __init__(self, version: int, bases: Mapping[str, Path], where: str) -> None:
        self.version = version
        self.bases: Mapping[str, Path] = dict(bases)
        """Controller -> the parent directory of this host's sandbox cgroups."""
        self._where = where

    def create(self, name: str, limits: CgroupLimits) -> SandboxCgroup:
        """A fresh, limited cgroup. A leftover of the same name is killed and replaced,
        so its processes die and its counters (oom kills, cpu) start from zero."""
        cgroup = self._cgroup(name)
        cgroup.destroy()
        try:
            for directory in cgroup.hierarchies:
                directory.mkdir()
            _apply_limits(cgroup, limits)
        except BaseException:
            with contextlib.suppress(OSError):
                cgroup.destroy()
            raise
        return cgroup

    def sweep_stale(self, keep: Iterable[str] = ()) -> list[str]:
        """Kill and remove every sandbox cgroup here not named in ``keep``."""
        kept = set(keep)
        found: set[str] = set()
        for base in set(self.bases.values()):
            with contextlib.suppress(FileNotFoundError), os.scandir(base) as entries:
                found.update(
                    entry.name
                    for entry in entries
                    if entry.is_dir(follow_symlinks=False) and NAME.fullmatch(entry.name)
                )
        removed = []
        for name in sorted(found - kept):
            try:
                self._cgroup(name).destroy()
            except OSError as exc:
                log.warning("cannot remove stale cgroup %s: %s", name, exc)
                continue
            removed.append(name)
        return removed

    def release(self) -> None:
        """Removes this host's parent directories if no sandbox cgroup is left in them."""
        for base in set(self.bases.values()):
            with contextlib.suppress(OSError):
                base.rmdir()

    def describe(self) -> str:
        return f"cgroup v{self.version} ({', '.join(self.bases)}) under {self._where}"

    def _cgroup(self, name: str) -> SandboxCgroup:
        if not NAME.fullmatch(name):
            raise ValueError(f"invalid cgroup name {name!r}: use 1-64 of [a-z0-9-]")
        dirs = {controller: base / name for controller, base in self.bases.items()}
        return SandboxCgroup(name, self.version, dirs)


def detect_cgroups(
    root: Path = Path("/sys/fs/cgroup"),
    *,
    proc_self_cgroup: Path = Path("/proc/self/cgroup"),
    parent: str = PARENT,
) -> Cgroups:
    """The place for sandbox cgroups; makes the ``parent`` directory if needed.

    Raises IsolationUnavailable naming what is missing or not writable.
    """
    if not NAME.fullmatch(parent):
        raise ValueError(f"invalid cgroup parent name {parent!r}")
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError as exc:
        raise IsolationUnavailable(f"cannot read {proc_self_cgroup}: {exc.strerror}") from exc
    members = _memberships(lines)
    if (root / "cgroup.controllers").exists():
        return _detect_v2(root, members, parent)
    return _detect_v1(root, members, parent)


def _memberships(lines: list[str]) -> dict[str, tuple[str, str]]:
    """controller -> (its hierarchy's controller list, our path); "" is the v2 one."""
    members: dict[str, tuple[str, str]] = {}
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:
            members[""] = ("", path)
        for controller in filter(None, controllers.split(",")):
            members[controller] = (controllers, path)
    return members


def _detect_v1(root: Path, members: dict[str, tuple[str, str]], parent: str) -> Cgroups:
    bases: dict[str, Path] = {}
    places: dict[str, list[str]] = {}
    for controller in (*REQUIRED, *V1_OPTIONAL):
        found = _v1_own(root, controller, members)
        if found is not None:
            mount, own = found
            bases[controller] = own / parent
            places.setdefault("/" + str((own / parent).relative_to(mount)), []).append(controller)
    missing = [controller for controller in REQUIRED if controller not in bases]
    if missing:
        raise IsolationUnavailable(
            f"cgroup v1 controller(s) {', '.join(missing)} not found under {root} "
            "(not mounted, or this process is in none of their cgroups); sandboxes need "
            "memory, pids and cpu limits"
        )
    for base in set(bases.values()):
        _make_parent(base)
    if len(places) == 1:
        where = next(iter(places))
    else:
        where = ", ".join(f"{path} ({', '.join(names)})" for path, names in places.items())
    return Cgroups(1, bases, where)


def _v1_own(
    root: Path, controller: str, members: dict[str, tuple[str, str]]
) -> tuple[Path, Path] | None:
    """(the hierarchy's mount, this process's cgroup in it), resolved so that
    co-mounted controllers (``cpu,cpuacct``) compare equal."""
    if controller not in members:
        return None
    together, path = members[controller]
    for mount in (root / controller, root / together):
        if not (mount / "cgroup.procs").exists():
            continue
        mount = mount.resolve()
        own = mount / path.lstrip("/")
        if own.is_dir():
            return mount, own
        # A container given a hierarchy's subtree as its mount: the paths in
        # /proc/self/cgroup are the host's, and we live at the mount itself.
        with contextlib.suppress(OSError):
            if str(os.getpid()) in _read(mount / "cgroup.procs").split():
                return mount, mount
    return None


def _detect_v2(root: Path, members: dict[str, tuple[str, str]], parent: str) -> Cgroups:
    if "" not in members:
        raise IsolationUnavailable("this process has no cgroup v2 entry in /proc/self/cgroup")
    relative = members[""][1].lstrip("/")
    own = root / relative
    if not own.is_dir():
        raise IsolationUnavailable(f"this process's cgroup /{relative} is not under {root}")
    if not relative:
        place = root
    elif _delegated(own.parent) or (own.parent == root and (root / "cgroup.type").exists()):
        place = own.parent
    else:
        raise IsolationUnavailable(
            f"the sandbox host runs in cgroup /{relative}, which holds processes, so cgroup "
            "v2 cannot limit cgroups beneath it; run the host in a leaf of a delegated "
            "cgroup (systemd: Delegate=yes and DelegateSubgroup=host) so sandboxes go beside it"
        )
    available = _read(place / "cgroup.controllers").split()
    missing = [controller for controller in REQUIRED if controller not in available]
    if missing:
        raise IsolationUnavailable(
            f"cgroup v2 controller(s) {', '.join(missing)} are not available in {place}; "
            "enable them in its parent's cgroup.subtree_control"
        )
    base = place / parent
    _enable(place)
    _make_parent(base)
    _enable(base)
    where = "/" + str(base.relative_to(root))
    return Cgroups(2, dict.fromkeys(REQUIRED, base), where)


def _delegated(directory: Path) -> bool:
    for attribute in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            if os.getxattr(directory, attribute):
                return True
    return False


def _enable(directory: Path) -> None:
    control = directory / "cgroup.subtree_control"
    enabled = _read(control).split()
    wanted = " ".join(f"+{name}" for name in REQUIRED if name not in enabled)
    if not wanted:
        return
    try:
        _write(control, wanted)
    except OSError as exc:
        hint = " (it holds processes)" if exc.errno == errno.EBUSY else ""
        raise IsolationUnavailable(
            f"cannot enable {wanted} in {control}{hint}: {exc.strerror}"
        ) from exc


def _make_parent(base: Path) -> None:
    try:
        base.mkdir(exist_ok=True)
    except OSError as exc:
        raise IsolationUnavailable(
            f"cannot create cgroup {base}: {exc.strerror} (the sandbox host must run as "
            "root with a writable cgroup filesystem)"
        ) from exc


def _apply_limits(cgroup: SandboxCgroup, limits: CgroupLimits) -> None:
    quota = max(CPU_MIN_QUOTA_US, round(limits.cpus * CPU_PERIOD_US))
    memory, pids, cpu = (cgroup.dirs[name] for name in REQUIRED)
    if cgroup.version == 1:
        _write(memory / "memory.limit_in_bytes", str(limits.memory_bytes))
        # Equal to the memory limit: no swap on top of it. Absent without swapaccount.
        if (memory / "memory.memsw.limit_in_bytes").exists():
            _write(memory / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
        _write(pids / "pids.max", str(limits.pids))
        _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(cpu / "cpu.cfs_quota_us", str(quota))
    else:
        _write(memory / "memory.max", str(limits.memory_bytes))
        if (memory / "memory.swap.max").exists():
            _write(memory / "memory.swap.max", "0")
        _write(pids / "pids.max", str(limits.pids))
        _write(cpu / "cpu.max", f"{quota} {CPU_PERIOD_US}")


def _remove_tree(top: Path, deadline: float) -> None:
    for directory, _, _ in os.walk(top, topdown=False):
        pause = FIRST_POLL_SECONDS
        while True:
            try:
                os.rmdir(directory)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                # Exited tasks can hold a cgroup busy for a moment after they left
                # cgroup.procs.
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    raise
                pause = _pause(pause)


def _pause(seconds: float) -> float:
    """Sleeps ``seconds``; returns the next, longer pause."""
    time.sleep(seconds)
    return min(seconds * 2, POLL_SECONDS)


def _sigkill(pids: Iterable[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _keyed(path: Path) -> dict[str, int]:
    values = {}
    for line in _read(path).splitlines():
        key, _, value = line.partition(" ")
        with contextlib.suppress(ValueError):
            values[key] = int(value)
    return values


def _read(path: Path) -> str:
    return path.read_text().strip()


def _write(path: Path, value: str) -> None:
    # One write(2) per value: cgroup files act on each write, and a short or
    # split write would be a different request.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {value!r} to {path}: {exc.strerror}") from exc
    finally:
        os.close(fd)
