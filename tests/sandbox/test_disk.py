"""Each sandbox's disk (``sandbox_host/disk.py``): all a sandbox can write to
(/workspace, /tmp, its writable mounts) is on a disk of its own of
``STEAD_SANDBOX_DISK_MB``. A sandbox that fills it is told "No space left on
device" and harms neither another sandbox nor the host; it still sleeps and
wakes with its files; and its disk leaves no mount, loop device or image behind
when it is destroyed or its host is killed and restarted."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import anyio
import pytest

from stead import tools
from stead.sandbox import (
    FileError,
    HostClient,
    HostSandbox,
    SandboxNotFound,
    SandboxUnavailable,
    ops,
)
from stead.sandbox_host import disk as disk_module
from stead.sandbox_host import loop_mounts
from stead.sandbox_host.disk import SandboxDisk
from stead.sandbox_host.selfcheck import check_disk
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import (
    WAIT,
    client_of,
    config,
    host_on_a_manual_clock,
    new_id,
    requires_isolation,
)
from tests.sandbox.disks import (
    DISK_ENV,
    DISK_MB,
    loops_under,
    mounted,
    mounts_under,
    nothing_left_under,
    run,
    sandbox_dir,
)

pytestmark = [pytest.mark.anyio, requires_isolation]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory, forker: ServeForker) -> Iterator[HostProcess]:
    """The module's host, with small disks (the conftest's ``client`` and
    ``sandbox`` use it)."""
    root = tmp_path_factory.mktemp("host")
    env = {"STEAD_SANDBOX_IDLE_CHECK_SECONDS": "0.2", **DISK_ENV}
    process = HostProcess(root / "state", env=env, forker=forker).start()
    yield process
    process.stop()


async def test_a_sandbox_that_fills_its_disk_is_told_so_and_harms_nothing_else(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    filled = await run(
        sandbox,
        "dd if=/dev/zero of=/workspace/big bs=1M count=64 2>&1; echo dd=$?;"
        " fallocate -l 1G /tmp/big; echo fallocate=$?; df -m /workspace | tail -1",
    )
    assert "No space left on device" in filled and "dd=1" in filled, filled
    assert "fallocate=1" in filled, filled
    assert int(filled.split()[-5]) <= DISK_MB  # df's size, in MiB
    with pytest.raises(FileError, match="no space left on device"):
        await sandbox.write_file("more", b"x" * 1024**2)
    image = sandbox_dir(host, sandbox.sandbox_id) / "disk.img"
    assert image.stat().st_blocks * 512 <= DISK_MB * 1024**2  # all the host's disk gave it

    other = HostSandbox(sandbox.client, new_id(), config())
    await other.write_file("fine", b"y" * 1024**2)
    assert await other.read_file("fine", max_bytes=2 * 1024**2) == b"y" * 1024**2
    assert "other ok" in await run(other, "echo other ok")
    await sandbox.client.destroy(other.sandbox_id)

    # Freed, the full sandbox writes again.
    assert "freed" in await run(
        sandbox, "rm /workspace/big && echo freed > /workspace/note; cat note"
    )


async def test_an_edit_or_write_the_full_disk_refuses_leaves_the_file_as_it_was(
    sandbox: HostSandbox,
) -> None:
    """The file tools (``run_tool``, as the agent loop calls them) on a full
    disk: the call is an error, and the file it would have grown keeps every
    byte it had, not a file cut to nothing; a file it would have made is not
    left empty."""
    kept = b"".join(b"line %d\n" % i for i in range(20_000))
    await sandbox.write_file("notes.txt", kept)
    filled = await run(sandbox, "dd if=/dev/zero of=/workspace/big bs=1M 2>&1; df -k . | tail -1")
    assert "No space left on device" in filled, filled

    grown = "line 19999\n" + "x" * 200_000 + "\n"
    edit = {"file_path": "notes.txt", "old_string": "line 19999\n", "new_string": grown}
    edited = await tools.run_tool("edit", edit, sandbox, op_key=new_id())
    assert edited.is_error and "no space left on device" in edited.content[0]["text"]
    assert await sandbox.read_file("notes.txt", max_bytes=4 * len(kept)) == kept

    write = {"file_path": "notes.txt", "content": "y" * (len(kept) + 200_000)}
    written = await tools.run_tool("write", write, sandbox, op_key=new_id())
    assert written.is_error and "no space left on device" in written.content[0]["text"]
    assert await sandbox.read_file("notes.txt", max_bytes=4 * len(kept)) == kept

    # A file the refused write would have made is not left behind, empty.
    fresh = {"file_path": "fresh.txt", "content": "z" * 200_000}
    made = await tools.run_tool("write", fresh, sandbox, op_key=new_id())
    assert made.is_error and "no space left on device" in made.content[0]["text"]
    assert "fresh.txt" not in await run(sandbox, "ls /workspace")

    # With room again, the same edit goes through.
    await run(sandbox, "rm /workspace/big")
    assert not (await tools.run_tool("edit", edit, sandbox, op_key=new_id())).is_error
    assert await sandbox.read_file("notes.txt", max_bytes=2 * len(kept)) == kept.replace(
        b"line 19999\n", grown.encode()
    )


async def test_a_full_disk_sleeps_and_wakes_with_its_files_and_an_empty_tmp(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    made = await run(
        sandbox,
        "head -c 12M /dev/urandom > keep && sha256sum keep > keep.sum"
        " && dd if=/dev/zero of=/tmp/filler bs=1M 2>&1 | grep -c 'No space left'",
    )
    assert made.strip().endswith("1"), made
    assert await sandbox.sleep()
    root = sandbox_dir(host, sandbox.sandbox_id)
    await nothing_left_under(root)  # asleep: not mounted
    checked = await run(sandbox, "sha256sum -c keep.sum && ls -A /tmp | wc -l")
    assert "keep: OK" in checked and checked.strip().endswith("0"), checked


async def test_a_sandbox_whose_body_died_sleeps_with_its_disk_unmounted(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    """Its code can kill its own supervisor: the body stops on its own, and
    its sleep must still let go of what the body held (disk, cgroup)."""
    await sandbox.write_file("note", b"kept")
    root = sandbox_dir(host, sandbox.sandbox_id)
    await run(sandbox, "kill -9 -1")
    with anyio.fail_after(WAIT):
        while (await sandbox.status())["state"] != "cold":  # noqa: ASYNC110
            await anyio.sleep(0.02)
    assert await sandbox.sleep()
    await nothing_left_under(root)
    assert await sandbox.read_file("note", max_bytes=10) == b"kept"


async def test_a_directory_over_a_thousand_levels_deep_stops_no_sleep_wake_or_destroy(
    client: HostClient, host: HostProcess
) -> None:
    """The host empties /tmp at each sleep and wake, and drops the workspace
    once saved, as root."""
    sandbox = HostSandbox(client, new_id(), config())
    nest = "python3 -c \"import os\nfor _ in range(1200): os.mkdir('d'); os.chdir('d')\""
    assert "made" in await run(sandbox, f"cd /tmp && {nest} && echo made")
    assert await sandbox.sleep()
    assert (await run(sandbox, "ls -A /tmp | wc -l")).split()[-1] == "0"
    assert "made" in await run(sandbox, f"{nest} && echo made")  # in /workspace
    await client.destroy(sandbox.sandbox_id)  # its final sleep saves and drops it
    await nothing_left_under(sandbox_dir(host, sandbox.sandbox_id))


async def test_a_destroyed_sandbox_leaves_no_mount_loop_device_or_image(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    await sandbox.write_file("note", b"1")
    root = sandbox_dir(host, sandbox.sandbox_id)
    assert mounts_under(root) and loops_under(root)
    await sandbox.client.destroy(sandbox.sandbox_id)
    await nothing_left_under(root)
    assert not root.exists()


@pytest.mark.parametrize("anyio_backend", [("asyncio", {"use_uvloop": True})])
async def test_a_destroy_waits_for_a_mount_call_on_the_disk_and_later_ones_are_told_it_is_gone(
    tmp_path: Path,
) -> None:
    """A mount call works on the disk in a worker thread. A destroy meanwhile
    unmounted it from under the call, which then wrote onto the host's own
    disk (``disk/mnt`` made again there) or failed with ``[Errno 2]`` once the
    directory was gone. Here a call in flight holds the disk as a mount call
    does while the destroy comes, and another mount call comes after it."""
    async with host_on_a_manual_clock(tmp_path) as (manager, _, client, options):
        sandbox_id = new_id()
        put = ops.PutMount(
            sandbox_id=sandbox_id,
            config=config().to_json(),
            mount="/mnt/session/in",
            files=[ops.MountFile(path="a", data=b"a")],
            writable=False,
        )
        await client.call(put)
        read = ops.ReadMount(sandbox_id=sandbox_id, mount="/mnt/session/in", path="a", max_bytes=1)
        in_flight = await manager.get(sandbox_id)
        disk = in_flight.disk
        late = [ops.MountFile(path="b", data=b"b")]
        async with anyio.create_task_group() as tasks, disk.held():
            tasks.start_soon(client.destroy, sandbox_id)
            with anyio.fail_after(WAIT):
                while True:  # refused once the destroy has reached the disk
                    try:
                        assert await client.call(read) == ops.Data(data=b"a")
                    except SandboxNotFound:
                        break
                    await anyio.sleep(0.02)
            # The call in flight still works on the disk, not the host's.
            assert mounted(disk.mountpoint)
            await anyio.to_thread.run_sync(
                partial(in_flight.mounts.put, "/mnt/session/late", late, writable=False)
            )
            assert (disk.mnt / "session" / "late" / "b").read_bytes() == b"b"
            assert mounted(disk.mountpoint)
        root = options.work_dir / "sandboxes" / sandbox_id
        await nothing_left_under(options.work_dir / "sandboxes")
        assert not root.exists()
        with pytest.raises(SandboxNotFound):
            await client.call(read)


async def test_a_disk_held_past_the_wait_is_not_removed_and_stays_usable(tmp_path: Path) -> None:
    """A destroy does not wait for good: it fails (and is retried later),
    never unmounting the disk from under what holds it."""
    root = tmp_path / "sandbox"
    disk = SandboxDisk(root, DISK_MB * 1024**2, 2_999_003)
    async with disk.held():
        with pytest.raises(SandboxUnavailable, match="still in use"):
            await disk.remove(wait=0.1)
        assert mounted(disk.mountpoint) and disk.image.exists()
        disk.restore()
        async with disk.held():  # a later call
            (disk.mountpoint / "still").write_bytes(b"here")
    assert not mounted(disk.mountpoint) and disk.image.exists()
    await disk.remove()
    await nothing_left_under(root)
    assert not disk.image.exists()


async def test_a_killed_host_restarts_without_its_mounts_and_keeps_the_files(
    tmp_path: Path, forker: ServeForker
) -> None:
    process = HostProcess(tmp_path / "state", env=DISK_ENV, forker=forker).start()
    sandboxes = process.work_dir / "sandboxes"
    try:
        client = client_of(process)
        first = HostSandbox(client, new_id(), config())
        await first.write_file("note", b"unsaved")  # awake, warm: in no snapshot
        await HostSandbox(client, new_id(), config()).write_file("note", b"2")
        await client.aclose()
        assert len(mounts_under(sandboxes)) == 2
        process.kill()
        assert len(mounts_under(sandboxes)) == 2  # what a killed host leaves

        process.start()
        await nothing_left_under(sandboxes)
        client = client_of(process)
        first = HostSandbox(client, first.sandbox_id, config())
        assert await first.read_file("note", max_bytes=10) == b"unsaved"
        for sandbox_id in [p.name for p in sandboxes.iterdir()]:
            await client.destroy(sandbox_id)
        await client.aclose()
        await nothing_left_under(sandboxes)
        assert list(sandboxes.iterdir()) == []
    finally:
        process.stop()


async def test_a_workspace_left_by_a_host_killed_mid_sleep_leaves_its_restore_room(
    tmp_path: Path, forker: ServeForker
) -> None:
    """Killed after the sleep's snapshot, before its drop of the workspace was
    done: what is left on the disk is not the workspace (the snapshot is), and
    must not take the room its restore needs."""
    process = HostProcess(tmp_path / "state", env=DISK_ENV, forker=forker).start()
    try:
        client = client_of(process)
        sandbox = HostSandbox(client, new_id(), config())
        made = await run(sandbox, "head -c 15M /dev/urandom >big; sha256sum big >sum; echo made")
        assert "made" in made, made
        assert await sandbox.sleep()
        await client.aclose()
        process.kill()
        mounted = tmp_path / "mounted"
        mounted.mkdir()
        loop_mounts.mount_image(sandbox_dir(process, sandbox.sandbox_id) / "disk.img", mounted)
        try:  # what the drop had not removed yet
            (mounted / "workspace").mkdir()
            (mounted / "workspace" / "big").write_bytes(os.urandom(15 * 1024**2))
        finally:
            loop_mounts.unmount(mounted)

        process.start()
        client = client_of(process)
        sandbox = HostSandbox(client, sandbox.sandbox_id, config())
        assert "big: OK" in await run(sandbox, "sha256sum -c sum")
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()
    finally:
        process.stop()


async def test_a_new_sandbox_takes_a_disk_made_ahead_and_another_is_made(
    client: HostClient, host: HostProcess
) -> None:
    spares = host.work_dir / "disks"
    with anyio.fail_after(WAIT):
        while len(before := sorted(spares.glob("*.img"))) < 2:  # noqa: ASYNC110
            await anyio.sleep(0.02)
    made_ahead = {p.stat().st_ino for p in before}
    sandbox = HostSandbox(client, new_id(), config())
    await sandbox.write_file("note", b"1")
    image = sandbox_dir(host, sandbox.sandbox_id) / "disk.img"
    assert image.stat().st_ino in made_ahead  # a spare, renamed: not made by the wake
    with anyio.fail_after(WAIT):
        while len(list(spares.glob("*.img"))) < 2:  # noqa: ASYNC110
            await anyio.sleep(0.02)
    await client.destroy(sandbox.sandbox_id)


async def test_only_root_can_read_a_sandboxs_disk_image(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    """The image holds every file of the sandbox whatever its mode (and what it
    deleted, until discarded): a host user who can name it must not read it."""
    await sandbox.write_file("note", b"1")
    spares = host.work_dir / "disks"
    with anyio.fail_after(WAIT):
        while not any(spares.glob("*.img")):  # noqa: ASYNC110
            await anyio.sleep(0.02)
    images = [sandbox_dir(host, sandbox.sandbox_id) / "disk.img", *spares.glob("*.img")]
    for image in images:
        assert stat.S_IMODE(image.stat().st_mode) == 0o600, image


async def test_no_other_user_of_the_host_reaches_a_sandboxs_tmp_or_workspace(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    """/tmp was a private memory file system; on the disk, under directories
    every user may search, it must stay the sandbox's own (as its workspace)."""
    await run(sandbox, "echo 1 > /tmp/mine && echo 1 > /workspace/mine")
    disk = sandbox_dir(host, sandbox.sandbox_id) / "disk"
    other = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    for command in (["touch", f"{disk}/tmp/planted"], ["cat", f"{disk}/workspace/mine"]):
        with anyio.fail_after(WAIT):
            done = await anyio.run_process([*other, *command], check=False)
        assert done.returncode != 0 and b"Permission denied" in done.stderr, command
    # The sandbox's own user still reaches both (the file tools act as it).
    assert await sandbox.read_file("/workspace/mine", max_bytes=10) == b"1\n"
    assert "/tmp/mine" in await run(sandbox, "ls /tmp/mine")


async def test_what_an_earlier_stead_kept_on_the_hosts_disk_moves_onto_the_disk(
    tmp_path: Path,
) -> None:
    """Sandboxes awake when a host of an earlier stead stopped left their
    workspace (warm: in no snapshot yet) and mount tree beside the image's place."""
    uid = 2_999_001
    root = tmp_path / "sandbox"
    (root / "workspace" / "deep").mkdir(parents=True)
    (root / "workspace" / "deep" / "f").write_bytes(b"kept")
    os.chown(root / "workspace" / "deep" / "f", uid, uid)
    (root / "mnt" / "session").mkdir(parents=True)
    disk = SandboxDisk(root, DISK_MB * 1024**2, uid)
    async with disk.held():
        moved = disk.workspace / "deep" / "f"
        assert moved.read_bytes() == b"kept" and moved.stat().st_uid == uid
        assert (disk.mnt / "session").is_dir()
    assert not (root / "workspace").exists() and not (root / "mnt").exists()
    await disk.remove()
    await nothing_left_under(root)


async def test_a_host_killed_while_it_removes_what_it_moved_onto_the_disk_loses_none_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed once the workspace is on the disk, with some of the host's copy
    removed: the next host keeps the disk's copy, not what was left."""
    uid = 2_999_002
    root = tmp_path / "sandbox"
    (root / "workspace").mkdir(parents=True)
    for name in ("a", "b"):
        (root / "workspace" / name).write_bytes(name.encode())

    class Killed(Exception):
        pass

    def killed_midway(path: Path, **_: object) -> None:
        if path.parent == root and path.exists():  # the host's copy, not one on the disk
            for file in sorted(path.iterdir())[:1]:
                file.unlink()
            raise Killed

    monkeypatch.setattr(disk_module, "remove_tree", killed_midway)
    disk = SandboxDisk(root, DISK_MB * 1024**2, uid)
    with pytest.raises(Killed):
        await disk.acquire()
    monkeypatch.undo()

    disk = SandboxDisk(root, DISK_MB * 1024**2, uid)  # the next host's
    async with disk.held():
        assert sorted(p.name for p in disk.workspace.iterdir()) == ["a", "b"]
    assert sorted(p.name for p in root.iterdir()) == ["disk", "disk.img"]
    await disk.remove()
    await nothing_left_under(root)


def test_the_self_check_names_a_missing_mkfs_or_resize2fs_and_leaves_nothing(
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
    monkeypatch.undo()

    # A disk grows at a wake when the host's size was raised: the check grows one.
    found = loop_mounts._tool
    monkeypatch.setattr(
        loop_mounts, "_tool", lambda name: None if name == "resize2fs" else found(name)
    )
    problem = check_disk(tmp_path)
    assert problem is not None and problem.endswith(
        "resize2fs not found (apt-get install e2fsprogs)"
    )
    assert list(tmp_path.iterdir()) == []


async def test_the_self_check_clears_the_probe_of_a_host_killed_during_it(tmp_path: Path) -> None:
    """A host killed while its probe disk was mounted left it mounted, on a
    loop device, in a directory named after its pid; the next start's check
    (another pid) must not leave it so for good."""
    left = tmp_path / "disk-probe-1"
    (left / "disk").mkdir(parents=True)
    loop_mounts.make_image(left / "disk.img", 16 * 1024**2)
    loop_mounts.mount_image(left / "disk.img", left / "disk")
    assert check_disk(tmp_path) is None
    await nothing_left_under(tmp_path)
    assert not left.exists()


def test_the_self_check_names_the_fix_on_a_machine_without_loop_devices(tmp_path: Path) -> None:
    """Run where /dev/loop-control is not one (a private mount namespace puts
    a plain file over it), as in a container that was not given it."""
    plain = tmp_path / "not-loop-control"
    plain.touch()
    check = (
        "import sys; from pathlib import Path; from stead.sandbox_host.selfcheck import check_disk;"
        " print(check_disk(Path(sys.argv[1])))"
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         'mount --bind "$0" /dev/loop-control && exec "$1" -c "$2" "$3"',
         plain, sys.executable, check, tmp_path],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    problem = done.stdout.strip()
    assert "\n" not in problem
    assert problem.startswith("cannot give sandboxes a disk of their own"), problem
    assert "modprobe loop" in problem and "/dev/loop-control" in problem, problem
    assert list(tmp_path.iterdir()) == [plain]
