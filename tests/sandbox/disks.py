"""What the disk tests share (``test_disk.py``, ``test_disk_size.py``)."""

from __future__ import annotations

from pathlib import Path

import anyio

from stead.sandbox import HostSandbox
from stead.testing import HostProcess
from tests.sandbox.conftest import WAIT, new_id

DISK_MB = 32
DISK_ENV = {"STEAD_SANDBOX_DISK_MB": str(DISK_MB)}


def mounts_under(directory: Path) -> list[str]:
    prefix = f"{directory}/"
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        return [p for line in table if (p := line.split(" ", 5)[4]).startswith(prefix)]


def mounted(point: Path) -> bool:
    return str(point) in mounts_under(point.parent)


def loops_under(directory: Path) -> list[str]:
    """The loop devices whose image is below ``directory``."""
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            if backing.read_text().startswith(f"{directory}/"):
                found.append(backing.parent.parent.name)
        except OSError:
            continue  # detached meanwhile
    return found


async def nothing_left_under(directory: Path) -> None:
    """No mount and, once each has cleared itself, no loop device below ``directory``."""
    assert mounts_under(directory) == []
    with anyio.fail_after(WAIT):
        while loops_under(directory):  # noqa: ASYNC110
            await anyio.sleep(0.02)


async def run(sandbox: HostSandbox, command: str) -> str:
    return (await sandbox.exec(command, op_key=new_id(), timeout=60)).output


def sandbox_dir(host: HostProcess, sandbox_id: str) -> Path:
    return host.work_dir / "sandboxes" / sandbox_id
