"""A sandbox's disk's size and format (``sandbox_host/disk.py``,
``loop_mounts.py``): it holds as many small files as its blocks do, grows to a
larger ``STEAD_SANDBOX_DISK_MB`` keeping its files and never shrinks, and a new
sandbox never gets a spare disk of an earlier size or format."""

from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import anyio
import pytest

from stead.sandbox import HostSandbox, WorkspaceUnavailable
from stead.sandbox_host import loop_mounts
from stead.sandbox_host.disk import SpareDisks
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import client_of, config, new_id, requires_isolation
from tests.sandbox.disks import DISK_ENV, DISK_MB, nothing_left_under, run

pytestmark = [pytest.mark.anyio, requires_isolation]


SMALL_FILES = """
import errno, os
made = 0
try:
    while True:
        if made % 1000 == 0:
            os.mkdir(f"d{made // 1000}")
        with open(f"d{made // 1000}/f{made}", "wb") as small:
            small.write(b"x" * 100)
        made += 1
except OSError as exc:
    print("made", made, errno.errorcode[exc.errno])
"""


async def test_a_disk_holds_small_files_until_its_blocks_are_full(
    tmp_path: Path, forker: ServeForker
) -> None:
    """A workspace of many small files (node_modules, git objects) ran out of
    inodes long before blocks: mkfs gave a disk of 512 MiB and more one inode
    per 16 KiB, so this one was full at a quarter of its blocks."""
    disk_mb = 512  # mkfs itself gives smaller file systems one inode per 4 KiB
    env = {"STEAD_SANDBOX_DISK_MB": str(disk_mb)}
    process = HostProcess(tmp_path / "state", env=env, forker=forker).start()
    try:
        client = client_of(process)
        sandbox = HostSandbox(client, new_id(), config())
        fill = f"python3 -c '{SMALL_FILES}'; df --output=pcent /workspace | tail -1"
        filled = (await sandbox.exec(fill, op_key=new_id(), timeout=600)).output
        _, made, error, used = filled.split()
        assert error == "ENOSPC", filled
        assert int(made) * 4096 >= 0.8 * disk_mb * 1024**2, filled  # each takes one block
        assert int(used.rstrip("%")) >= 95, filled
        await client.destroy(sandbox.sandbox_id, erase=True)  # no snapshot of it all
        await client.aclose()
    finally:
        process.stop()


async def test_a_disk_grows_to_a_larger_setting_and_never_shrinks(
    tmp_path: Path, forker: ServeForker
) -> None:
    """A full disk stayed full when its host was started again with a larger
    STEAD_SANDBOX_DISK_MB, as the ENOSPC and WorkspaceUnavailable messages
    advise: a disk kept the size it was made with."""

    def host_of(disk_mb: int) -> HostProcess:
        return HostProcess(
            tmp_path / "state",
            blob_url=f"file://{tmp_path / 'blobs'}",
            work_dir=work_dir,
            env={"STEAD_SANDBOX_DISK_MB": str(disk_mb)},
            forker=forker,
        )

    work_dir = Path(tempfile.mkdtemp(prefix="stead-work-", dir="/tmp"))
    os.chmod(work_dir, 0o711)
    sandbox_id = new_id()
    process = host_of(DISK_MB).start()
    try:
        client = client_of(process)
        sandbox = HostSandbox(client, sandbox_id, config())
        full = await run(
            sandbox,
            "head -c 12M /dev/urandom > keep && sha256sum keep > keep.sum"
            " && dd if=/dev/zero of=filler bs=1M 2>&1 | grep -c 'No space left'",
        )
        assert full.strip().endswith("1"), full
        await client.aclose()
        process.kill()  # awake: its files are on the disk alone

        process = host_of(2 * DISK_MB).start()
        client = client_of(process)
        sandbox = HostSandbox(client, sandbox_id, config())
        more = await run(
            sandbox,
            "sha256sum -c keep.sum && head -c 24M /dev/urandom > more && echo wrote"
            " && df -m --output=size /workspace | tail -1",
        )
        assert "keep: OK" in more and "wrote" in more, more
        assert 2 * DISK_MB * 0.8 <= int(more.split()[-1]) <= 2 * DISK_MB, more
        await client.aclose()
        process.kill()

        process = host_of(DISK_MB).start()  # smaller again: the disk stays as it is
        client = client_of(process)
        sandbox = HostSandbox(client, sandbox_id, config())
        kept = await run(sandbox, "sha256sum -c keep.sum && df -m --output=size . | tail -1")
        assert "keep: OK" in kept and int(kept.split()[-1]) > DISK_MB, kept
        await client.destroy(sandbox_id)
        await client.aclose()
    finally:
        process.stop()


async def test_a_snapshot_bigger_than_the_disk_is_refused_on_restore_until_it_grows(
    tmp_path: Path, forker: ServeForker
) -> None:
    """Made on a host of bigger disks, then restored on one of smaller disks;
    and, as the refusal advises, on its host started with the bigger size again."""
    bigger = HostProcess(tmp_path / "state", env={"STEAD_SANDBOX_DISK_MB": "64"}, forker=forker)
    bigger.start()
    client = client_of(bigger)
    sandbox = HostSandbox(client, new_id(), config())
    assert "made" in await run(sandbox, "head -c 40M /dev/urandom > big && echo made")
    await client.destroy(sandbox.sandbox_id)  # its final snapshot
    await client.aclose()
    bigger.kill()
    smaller = HostProcess(
        bigger.state_dir,
        blob_url=bigger.blob_url,
        work_dir=bigger.work_dir,
        env=DISK_ENV,
        forker=forker,
    ).start()
    try:
        client = client_of(smaller)
        again = HostSandbox(client, sandbox.sandbox_id, config())
        with pytest.raises(WorkspaceUnavailable, match="does not fit its disk"):
            await run(again, "ls")
        await nothing_left_under(smaller.work_dir / "sandboxes")
        assert smaller.call({"op": "ping"}).get("error") is None
        await client.aclose()
        smaller.kill()
        smaller = HostProcess(
            bigger.state_dir,
            blob_url=bigger.blob_url,
            work_dir=bigger.work_dir,
            env={"STEAD_SANDBOX_DISK_MB": "64"},
            forker=forker,
        ).start()
        client = client_of(smaller)
        again = HostSandbox(client, sandbox.sandbox_id, config())
        assert "big" in await run(again, "ls")
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()
    finally:
        smaller.stop()


async def test_a_spare_of_an_earlier_size_is_never_taken(tmp_path: Path) -> None:
    """The host started again with another STEAD_SANDBOX_DISK_MB drops the
    earlier host's spares, in the background: a wake before that must not get one."""
    spares = tmp_path / "disks"
    SpareDisks(spares, DISK_MB * 1024**2, count=1).fill()
    bigger = SpareDisks(spares, 2 * DISK_MB * 1024**2)
    (tmp_path / "sandbox").mkdir()
    assert not await bigger.take(tmp_path / "sandbox" / "disk.img")
    assert not (tmp_path / "sandbox" / "disk.img").exists()


async def test_a_spare_of_an_earlier_format_is_never_taken(tmp_path: Path) -> None:
    """An earlier stead formatted disks otherwise (one inode per 16 KiB, spares
    named ``<hex>.img``): a new sandbox must get a disk of this one's format."""
    spares = tmp_path / "disks"
    spares.mkdir()
    earlier = spares / f"{uuid.uuid4().hex}.img"
    with earlier.open("wb") as image:
        image.truncate(512 * 1024**2)
    mkfs = [str(loop_mounts.mkfs_path()), "-q", "-F", "-b", "4096", "-m", "0", str(earlier)]
    with anyio.fail_after(60):
        await anyio.run_process(mkfs)
    (tmp_path / "sandbox").mkdir()
    assert not await SpareDisks(spares, 512 * 1024**2).take(tmp_path / "sandbox" / "disk.img")
    assert not (tmp_path / "sandbox" / "disk.img").exists()


def test_a_growth_cut_short_is_ended_at_the_next_mount(tmp_path: Path) -> None:
    """A host killed once the image was extended, before resize2fs ran: the
    next mount grows the file system to the image, whatever the host's size."""
    image = tmp_path / "disk.img"
    loop_mounts.make_image(image, DISK_MB * 1024**2)
    os.truncate(image, 2 * DISK_MB * 1024**2)
    assert loop_mounts.grow_image(image, DISK_MB * 1024**2)
    assert loop_mounts.fs_bytes(image) == 2 * DISK_MB * 1024**2
    assert not loop_mounts.grow_image(image, DISK_MB * 1024**2)
    assert image.stat().st_size == 2 * DISK_MB * 1024**2
