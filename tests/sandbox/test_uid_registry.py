"""The machine's registry of sandbox uid ranges (``stead.sandbox_host.uids``).

Each test keeps a registry of its own under ``tmp_path``: these tests are
about the registry itself (they exhaust it, corrupt it and fill it from many
processes), which the machine's real one must never see. Hosts in the other
sandbox tests claim in the real one.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stead.sandbox import IsolationUnavailable
from stead.sandbox_host.uids import Holder, UidRegistry, taken_by_machine

COUNT = 1000

CLAIM = """
import sys
from pathlib import Path
from stead.sandbox_host.uids import UidRegistry
print("ready", flush=True)
sys.stdin.read()  # every claimant waits here until the test lets all go at once
found = UidRegistry(Path(sys.argv[1])).claim(Path(sys.argv[2]), count=int(sys.argv[3]))
print(found.base, found.count)
"""


def state(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.mkdir()
    return path


def registry(tmp_path: Path, **space: int) -> UidRegistry:
    return UidRegistry(tmp_path / "registry" / "uid-ranges.json", **space)


def test_concurrent_claims_from_many_processes_never_overlap(tmp_path: Path) -> None:
    path = registry(tmp_path).path
    claimants = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIM, str(path), str(state(tmp_path, f"h{n}")), str(COUNT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(6)
    ]
    for claimant in claimants:
        assert claimant.stdout is not None and claimant.stdout.readline() == "ready\n"
    for claimant in claimants:
        assert claimant.stdin is not None
        claimant.stdin.close()
    ranges = []
    for claimant in claimants:
        assert claimant.stdout is not None
        base, count = map(int, claimant.stdout.read().split())
        assert claimant.wait(timeout=30) == 0
        claimant.stdout.close()
        ranges.append(range(base, base + count))
    taken = sorted(ranges, key=lambda r: r.start)
    assert all(a.stop <= b.start for a, b in itertools.pairwise(taken))
    assert len(UidRegistry(path).entries()) == 6


def test_a_host_gets_its_range_back_and_a_new_one_the_next_free(tmp_path: Path) -> None:
    uids = registry(tmp_path)
    first = uids.claim(state(tmp_path, "a"), count=COUNT)
    second = uids.claim(state(tmp_path, "b"), count=COUNT)
    again = uids.claim(tmp_path / "a", count=COUNT * 5)  # a later count changes nothing
    assert (first.base, second.base) == (2_000_000, 2_000_000 + COUNT)
    assert again == first
    assert first.installer_uid == first.last and first.probe_uid == first.last - 1
    # A range set by hand across two blocks leaves both to it.
    uids.claim(state(tmp_path, "c"), count=COUNT, base=second.last + 1 + COUNT // 2)
    assert uids.claim(state(tmp_path, "d"), count=COUNT).base == 2_000_000 + 4 * COUNT


def test_a_running_holder_is_named_and_keeps_its_range(tmp_path: Path) -> None:
    uids = registry(tmp_path)
    held = uids.claim(state(tmp_path, "running"), count=COUNT)
    with pytest.raises(IsolationUnavailable) as refused:
        uids.claim(state(tmp_path, "other"), count=COUNT, base=held.base + 10)
    reason = str(refused.value)
    assert f"{tmp_path / 'running'} (pid {os.getpid()})" in reason
    assert "STEAD_SANDBOX_UID_BASE" in reason


def test_a_stopped_hosts_range_goes_to_an_explicit_claim_and_comes_back(tmp_path: Path) -> None:
    uids = registry(tmp_path)
    stopped = Holder(os.getpid(), started=-1)  # a process long gone
    held = uids.claim(state(tmp_path, "stopped"), count=COUNT, holder=stopped)
    taken = uids.claim(state(tmp_path, "explicit"), count=COUNT, base=held.base)
    assert taken == held
    with pytest.raises(IsolationUnavailable, match="explicit"):
        uids.claim(tmp_path / "stopped", count=COUNT)  # the claimant (this process) runs
    uids.claim(tmp_path / "explicit", count=COUNT, base=held.base, holder=stopped)
    assert uids.claim(tmp_path / "stopped", count=COUNT) == held


def test_a_removed_state_directory_frees_its_range(tmp_path: Path) -> None:
    uids = registry(tmp_path)
    gone = uids.claim(state(tmp_path, "gone"), count=COUNT)
    shutil.rmtree(tmp_path / "gone")
    assert uids.claim(state(tmp_path, "next"), count=COUNT) == gone
    # A new directory at the old path is a new host: the range is not its.
    assert uids.claim(state(tmp_path, "gone"), count=COUNT).base == gone.base + COUNT
    assert [e.state_dir for e in uids.entries()] == [str(tmp_path / p) for p in ("next", "gone")]


def test_no_uid_handed_out_is_an_account_or_group_of_the_machine(tmp_path: Path) -> None:
    account = pwd.getpwnam("nobody").pw_uid
    uids = registry(tmp_path).claim(state(tmp_path, "a"), count=8, base=account - 3)
    given, top = [], None
    with pytest.raises(IsolationUnavailable, match="used up"):
        while True:
            top = uids.sandbox_uid_after(top)
            given.append(top)
    everything = [*given, uids.installer_uid, uids.probe_uid]
    assert account not in everything and len(set(everything)) == len(everything)
    assert not any(taken_by_machine(uid) for uid in everything)
    assert all(uid in uids for uid in everything)


def test_a_full_registry_refuses_clearly(tmp_path: Path) -> None:
    uids = registry(tmp_path, first=3_000_000, end=3_000_000 + 2 * COUNT)
    uids.claim(state(tmp_path, "a"), count=COUNT)
    uids.claim(state(tmp_path, "b"), count=COUNT)
    with pytest.raises(IsolationUnavailable, match=f"no free sandbox uid range of {COUNT}"):
        uids.claim(state(tmp_path, "c"), count=COUNT)


def test_an_unreadable_registry_is_refused_not_overwritten(tmp_path: Path) -> None:
    uids = registry(tmp_path)
    uids.path.parent.mkdir()
    uids.path.write_text("{not json")
    with pytest.raises(IsolationUnavailable, match="unreadable"):
        uids.claim(state(tmp_path, "a"), count=COUNT)
    assert uids.path.read_text() == "{not json"
