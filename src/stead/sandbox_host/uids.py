"""Which host uids a sandbox host gives its sandboxes: a range of its own,
claimed in a registry shared by every sandbox host on the machine (DESIGN
rule 7), so two hosts (two ``stead serve`` data directories, a test run
beside an operator's server) never run sandboxes as the same uid.

The registry is one JSON file (default ``/var/lib/stead/uid-ranges.json``),
read and rewritten only under an ``flock`` on ``<file>.lock``. Each entry
names a host by its state directory (path and inode) and records the range
and the process that last claimed it (pid and start time, so a reused pid is
not taken for the host). An entry whose state directory is gone, or is
another directory by now, is dropped at the next claim: removing a host's
state releases its range, also when nobody released it cleanly.

Within a range, sandboxes get uids from the bottom up; the package installer
and the start-up probe take the top two. No uid that is an account or a
group on the machine is ever handed out.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import os
import pwd
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from stead.sandbox import IsolationUnavailable

FIRST_UID = 2_000_000
"""Ranges the registry picks start here: far above a machine's own accounts."""
END_UID = 2**31 - 1
"""...and end below this: some tools read uids as signed 32-bit numbers."""
HELPERS = 2
"""The installer and the probe, at the top of every range."""


@dataclass(frozen=True, slots=True)
class UidRange:
    """A host's claimed range ``[base, base + count)``."""

    base: int
    count: int
    installer_uid: int
    """Runs the package installers; owns the installed package sets."""
    probe_uid: int
    """Runs the start-up isolation self-check."""

    @property
    def last(self) -> int:
        return self.base + self.count - 1

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.base <= uid <= self.last

    def sandbox_uid_after(self, top: int | None) -> int:
        """The uid for a new sandbox: the first above ``top`` (the highest
        given so far, None for none) that is no account or group. Raises
        ``IsolationUnavailable`` when the range has none left."""
        uid = self.base if top is None or top < self.base else top + 1
        while uid < self.probe_uid:
            if not taken_by_machine(uid):
                return uid
            uid += 1
        raise IsolationUnavailable(
            f"this sandbox host's uid range {self.base}-{self.last} is used up: "
            "set STEAD_SANDBOX_UID_BASE and STEAD_SANDBOX_UID_COUNT to a larger unused range"
        )

    def describe(self) -> dict[str, int]:
        return asdict(self)


def taken_by_machine(uid: int) -> bool:
    """Whether ``uid`` is an account or (as a sandbox's gid) a group here."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
        except KeyError:
            continue
        return True
    return False


@dataclass(frozen=True, slots=True)
class Holder:
    """A host process, told apart from a later process with the same pid."""

    pid: int
    started: int | None

    @classmethod
    def current(cls) -> Holder:
        return cls(os.getpid(), process_start(os.getpid()))

    def alive(self) -> bool:
        return self.started is not None and process_start(self.pid) == self.started


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields follow the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


@dataclass(frozen=True, slots=True)
class Entry:
    state_dir: str
    dev: int
    ino: int
    base: int
    count: int
    pid: int
    started: int | None

    @property
    def holder(self) -> Holder:
        return Holder(self.pid, self.started)

    def overlaps(self, base: int, count: int) -> bool:
        return self.base < base + count and base < self.base + self.count

    def names(self, state_dir: Path) -> bool:
        """Whether this entry is the one of ``state_dir`` as it is now."""
        return self.state_dir == str(state_dir) and _identity(state_dir) == (self.dev, self.ino)

    def stale(self) -> bool:
        return _identity(Path(self.state_dir)) != (self.dev, self.ino)


ENTRY_FIELDS = tuple(f.name for f in fields(Entry))


class UidRegistry:
    """The machine's registry of sandbox uid ranges at ``path``. Holds no
    state between calls; every claim reads the file under the lock."""

    def __init__(self, path: Path, *, first: int = FIRST_UID, end: int = END_UID) -> None:
        self.path = path
        self._first = first
        self._end = end

    def claim(
        self,
        state_dir: Path,
        *,
        count: int,
        base: int | None = None,
        prefer: int | None = None,
        holder: Holder | None = None,
    ) -> UidRange:
        """The range of the host on ``state_dir``, recorded as held by
        ``holder`` (default: this process).

        ``base`` claims ``[base, base + count)`` as the operator set it;
        without it the host gets the range it held before, else the free
        block holding ``prefer`` (a uid its sandboxes already have), else the
        lowest free block. Raises ``IsolationUnavailable`` naming the holder
        when a running host holds any of the range, or when no block is free.
        """
        state_dir = state_dir.resolve()
        holder = holder or Holder.current()
        with self._locked():
            entries = [e for e in self._read() if not e.stale()]
            mine = next((e for e in entries if e.names(state_dir)), None)
            others = [e for e in entries if e is not mine]
            if base is None:
                base, count = (mine.base, mine.count) if mine else self._free(others, count, prefer)
            _refuse_live_overlap(others, base, count)
            uids = _helpers(base, count)
            dev, ino = _identity(state_dir) or (0, 0)
            entry = Entry(str(state_dir), dev, ino, base, count, holder.pid, holder.started)
            self._write([*others, entry])
        return uids

    def entries(self) -> list[Entry]:
        """Every entry as recorded (stale ones included), for diagnostics and tests."""
        with self._locked():
            return self._read()

    def _free(self, others: list[Entry], count: int, prefer: int | None) -> tuple[int, int]:
        """A block of ``count`` uids at ``first + k * count`` that no entry overlaps."""
        if prefer is not None and self._first <= prefer < self._end:
            start = self._first + (prefer - self._first) // count * count
            if start + count <= self._end and not any(e.overlaps(start, count) for e in others):
                return start, count
        start = self._first
        while start + count <= self._end:
            tops = [e.base + e.count for e in others if e.overlaps(start, count)]
            if not tops:
                return start, count
            # On to the first block above everything in the way.
            start += -(-(max(tops) - start) // count) * count
        raise IsolationUnavailable(
            f"no free sandbox uid range of {count} is left in {self.path} "
            f"({len(others)} hosts hold ranges): remove the state directories of hosts "
            "no longer used, or set STEAD_SANDBOX_UID_BASE"
        )

    @contextlib.contextmanager
    def _locked(self) -> Any:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock")
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _read(self) -> list[Entry]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        try:
            # Fields a later stead may add are left out, not refused.
            return [
                Entry(**{name: item[name] for name in ENTRY_FIELDS})
                for item in json.loads(text)["entries"]
            ]
        except (ValueError, KeyError, TypeError) as exc:
            raise IsolationUnavailable(
                f"the sandbox uid registry {self.path} is unreadable ({exc}); "
                "repair it or move it away (every host then claims a range anew)"
            ) from None

    def _write(self, entries: list[Entry]) -> None:
        # A new file renamed over the old one: a reader never sees half a registry.
        temporary = self.path.with_name(self.path.name + ".new")
        body = json.dumps({"entries": [asdict(e) for e in entries]}, indent=1)
        with open(temporary, "w") as file:
            file.write(body + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, self.path)


def _refuse_live_overlap(others: list[Entry], base: int, count: int) -> None:
    """A stopped host's range may be claimed by an explicit setting (that host
    gets it back when it starts again while the claimant is not running); a
    running host's range never is."""
    for other in others:
        if other.overlaps(base, count) and other.holder.alive():
            raise IsolationUnavailable(
                f"sandbox uids {base}-{base + count - 1} overlap {other.base}-"
                f"{other.base + other.count - 1}, held by the running sandbox host of "
                f"{other.state_dir} (pid {other.pid}): set STEAD_SANDBOX_UID_BASE to "
                "another range, or unset it to get a free one"
            )


def _helpers(base: int, count: int) -> UidRange:
    """The range with its installer and probe uids: the top two that are no
    account or group, with room left below them for sandboxes."""
    helpers: list[int] = []
    uid = base + count - 1
    while len(helpers) < HELPERS and uid > base:
        if not taken_by_machine(uid):
            helpers.append(uid)
        uid -= 1
    if len(helpers) < HELPERS:
        raise IsolationUnavailable(
            f"sandbox uids {base}-{base + count - 1} leave no room for sandboxes: "
            "every uid is an account or group of this machine"
        )
    return UidRange(base, count, installer_uid=helpers[0], probe_uid=helpers[1])


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino
