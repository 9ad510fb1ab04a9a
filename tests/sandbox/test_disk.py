"""The sandbox host's self-check of sandbox disks (``loop_mounts.py``): a
machine that cannot make an ext4 image and mount it through a loop device is
refused at start with one line naming the fix, not found out at a wake."""

from __future__ import annotations

from pathlib import Path

import pytest

from stead.sandbox_host import loop_mounts
from stead.sandbox_host.selfcheck import check_disk
from tests.sandbox.conftest import requires_isolation

pytestmark = requires_isolation


def test_the_self_check_names_a_missing_mkfs_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert check_disk(tmp_path) is None
    monkeypatch.setattr(loop_mounts, "mkfs_path", lambda: None)
    problem = check_disk(tmp_path)
    assert problem is not None and problem.endswith(
        "mkfs.ext4 not found (apt-get install e2fsprogs)"
    )
    assert "\n" not in problem
    assert list(tmp_path.iterdir()) == []
