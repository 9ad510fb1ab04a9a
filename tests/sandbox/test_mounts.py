"""The mounts seam with real bubblewrap: content put under ``/mnt`` is there,
read-only or writable as asked; what the sandbox writes is listed and read
back; paths and links that try to leave a mount are refused and the sandbox
is unharmed; mounts survive sleep and wake."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator

import pytest

from stead.sandbox import (
    FileError,
    FileNotFound,
    FileTooLarge,
    HostClient,
    HostSandbox,
    InvalidArgument,
    MountFile,
    NotARegularFile,
    PathOutsideWorkspace,
    ops,
    protocol,
)
from stead.sandbox.host_mounts import HostMounts
from stead.sandbox_host.commands import NEW_SHELL
from stead.testing import HostProcess
from tests.sandbox.conftest import config, new_id, requires_isolation

pytestmark = [pytest.mark.anyio, requires_isolation]

UPLOADS = "/mnt/session/uploads"
OUTPUTS = "/mnt/session/outputs"


async def run(sandbox: HostSandbox, command: str) -> tuple[int | None, str]:
    result = await sandbox.exec(command, op_key=new_id(), timeout=30)
    return result.exit_code, result.output


def mounts_of(client: HostClient) -> HostMounts:
    async def same(_sandbox_id: str) -> tuple[HostClient, int | None]:
        return client, None

    return HostMounts(same)


async def test_read_only_content_is_readable_and_not_writable(
    sandbox: HostSandbox, client: HostClient
) -> None:
    mounts = mounts_of(client)
    data = b"quarterly numbers\n"
    await mounts.put(
        sandbox.sandbox_id, sandbox.config, UPLOADS, [MountFile("file_1", data)], writable=False
    )
    code, output = await run(sandbox, f"cat {UPLOADS}/file_1")
    assert (code, output) == (0, data.decode())
    for attempt in (
        f"echo x >> {UPLOADS}/file_1",
        f"rm -f {UPLOADS}/file_1",
        f"touch {UPLOADS}/other",
        f"mv {UPLOADS}/file_1 /tmp/stolen",
        f"chmod 666 {UPLOADS}/file_1",
    ):
        code, _ = await run(sandbox, attempt)
        assert code != 0, attempt
    assert await run(sandbox, f"cat {UPLOADS}/file_1") == (0, data.decode())


async def test_a_put_larger_than_one_frame_lands_whole(
    sandbox: HostSandbox, client: HostClient
) -> None:
    """Files of more than a protocol frame together (the skills of an agent, say):
    before, one call carried them all, the host refused the frame and dropped the
    connection, and the session's turn was retried for good."""
    mounts = mounts_of(client)
    files = [MountFile(f"s/{i}.bin", os.urandom(7 << 20)) for i in range(7)]
    files.append(MountFile("s/large.bin", os.urandom(ops.MOUNT_PART_BYTES + 1)))
    assert sum(len(f.data) for f in files) * 4 // 3 > protocol.MAX_FRAME
    await mounts.put(sandbox.sandbox_id, sandbox.config, UPLOADS, files, writable=False)
    listed = (await mounts.listing(sandbox.sandbox_id, UPLOADS)).files
    assert {f.path: f.sha256 for f in listed} == {
        f.path: hashlib.sha256(f.data).hexdigest() for f in files
    }


async def test_writes_under_a_writable_mount_are_listed_and_read_back(
    sandbox: HostSandbox, client: HostClient
) -> None:
    mounts = mounts_of(client)
    await mounts.put(sandbox.sandbox_id, sandbox.config, OUTPUTS, [], writable=True)
    code, output = await run(
        sandbox,
        f"mkdir -p {OUTPUTS}/charts && printf 'a,b\\n1,2\\n' > {OUTPUTS}/table.csv"
        f" && head -c 3000 /dev/zero > {OUTPUTS}/charts/zeros.bin"
        f" && ln -s /etc/passwd {OUTPUTS}/passwd && mkfifo {OUTPUTS}/pipe"
        # Names no stead file has (not UTF-8): a file, and a directory's file.
        f" && printf x > {OUTPUTS}/$'odd\\xff' && mkdir {OUTPUTS}/$'dir\\xfe'"
        f" && printf y > {OUTPUTS}/$'dir\\xfe'/inside",
    )
    assert code == 0, output
    listing = (await mounts.listing(sandbox.sandbox_id, OUTPUTS)).files
    assert [(f.path, f.size) for f in listing] == [("charts/zeros.bin", 3000), ("table.csv", 8)]
    table = await mounts.read(sandbox.sandbox_id, OUTPUTS, "table.csv", max_bytes=100)
    assert table == b"a,b\n1,2\n"
    assert listing[1].sha256 == hashlib.sha256(table).hexdigest()
    with pytest.raises(NotARegularFile):
        await mounts.read(sandbox.sandbox_id, OUTPUTS, "passwd", max_bytes=100_000)
    with pytest.raises(FileNotFound):
        await mounts.read(sandbox.sandbox_id, OUTPUTS, "missing", max_bytes=10)


async def test_a_file_put_in_parts_appears_whole_and_parts_out_of_order_are_refused(
    sandbox: HostSandbox, client: HostClient
) -> None:
    mounts = mounts_of(client)
    data = os.urandom(2 * ops.MOUNT_PART_BYTES + 5)  # three parts, the last short

    async def chunks() -> AsyncIterator[bytes]:
        for at in range(0, len(data), 3_000_000):  # not aligned with the parts
            yield data[at : at + 3_000_000]

    await mounts.put_stream(
        sandbox.sandbox_id, sandbox.config, UPLOADS, "deep/big.bin", chunks(), writable=False
    )
    code, output = await run(sandbox, f"sha256sum {UPLOADS}/deep/big.bin; ls -A {UPLOADS}/deep")
    assert (code, output.split()) == (
        0,
        [hashlib.sha256(data).hexdigest(), f"{UPLOADS}/deep/big.bin", "big.bin"],
    )
    read = b"".join(
        [
            c
            async for c in mounts.read_stream(
                sandbox.sandbox_id, UPLOADS, "deep/big.bin", max_bytes=len(data)
            )
        ]
    )
    assert read == data
    with pytest.raises(FileTooLarge):
        async for _ in mounts.read_stream(
            sandbox.sandbox_id, UPLOADS, "deep/big.bin", max_bytes=len(data) - 1
        ):
            pass
    part = ops.PutMountPart(
        sandbox_id=sandbox.sandbox_id,
        mount=UPLOADS,
        path="gap.bin",
        offset=10,
        data=b"x",
        last=True,
    )
    with pytest.raises(InvalidArgument, match="offset"):
        await client.call(part)
    assert await run(sandbox, f"test -e {UPLOADS}/gap.bin") == (1, "")


async def test_escaping_paths_and_links_are_refused_and_the_sandbox_is_unharmed(
    sandbox: HostSandbox, client: HostClient, host: HostProcess
) -> None:
    mounts = mounts_of(client)
    sandbox_id, config = sandbox.sandbox_id, sandbox.config
    await mounts.put(sandbox_id, config, OUTPUTS, [], writable=True)
    outside = host.work_dir / "outside-target"
    outside.mkdir()
    # The sandbox cannot name host paths, but it can plant links in its mount.
    code, output = await run(sandbox, f"ln -s /workspace {OUTPUTS}/dir && echo kept > keep.txt")
    assert code == 0, output
    for mount, path in (
        ("/mnt/session/../../etc", "passwd"),
        ("/etc", "passwd"),
        (OUTPUTS, "../uploads/x"),
        (OUTPUTS, "/etc/passwd"),
        (OUTPUTS, "dir/through-link"),
    ):
        with pytest.raises(InvalidArgument):
            await mounts.put(sandbox_id, config, mount, [MountFile(path, b"no")], writable=True)
    with pytest.raises(InvalidArgument):
        await mounts.remove(sandbox_id, OUTPUTS, ["dir/keep.txt"])
    with pytest.raises(InvalidArgument):
        await mounts.read(sandbox_id, OUTPUTS, "dir/keep.txt", max_bytes=100)
    assert await run(sandbox, "cat keep.txt; ls /mnt/session") == (0, "kept\noutputs\n")
    assert list(outside.iterdir()) == []


async def test_mounts_survive_sleep_and_wake_and_can_be_removed(
    sandbox: HostSandbox, client: HostClient
) -> None:
    mounts = mounts_of(client)
    sandbox_id, config = sandbox.sandbox_id, sandbox.config
    await mounts.put(
        sandbox_id, config, UPLOADS, [MountFile("a", b"A"), MountFile("b", b"B")], writable=False
    )
    await mounts.put(sandbox_id, config, OUTPUTS, [], writable=True)
    assert (await run(sandbox, f"echo out > {OUTPUTS}/o.txt"))[0] == 0
    assert await sandbox.sleep()
    # Asleep: listing and reading do not wake it.
    assert [f.path for f in (await mounts.listing(sandbox_id, OUTPUTS)).files] == ["o.txt"]
    assert (await sandbox.status())["state"] == "cold"
    woke = await run(sandbox, f"cat {UPLOADS}/a {UPLOADS}/b {OUTPUTS}/o.txt")
    assert woke == (0, NEW_SHELL + "ABout\n")  # the shell did not outlive the sleep
    await mounts.remove(sandbox_id, UPLOADS, ["a", "never-there"])
    assert await run(sandbox, f"ls {UPLOADS}") == (0, "b\n")
    await mounts.remove(sandbox_id, UPLOADS)
    assert (await run(sandbox, f"ls {UPLOADS}"))[0] != 0


async def test_a_file_takes_an_emptied_directory_s_place_and_impossible_names_are_refused(
    sandbox: HostSandbox, client: HostClient
) -> None:
    """Content that moved from ``a/b`` to ``a`` (the old file removed first) is
    put; a name the file system cannot hold, or a file where a directory holds
    files, is an ``InvalidArgument`` (the caller's), never a host failure that
    would be retried."""
    mounts = mounts_of(client)
    sandbox_id, config = sandbox.sandbox_id, sandbox.config
    await mounts.put(sandbox_id, config, UPLOADS, [MountFile("a/b", b"below")], writable=False)
    await mounts.remove(sandbox_id, UPLOADS, ["a/b"])
    await mounts.put(sandbox_id, config, UPLOADS, [MountFile("a", b"in its place")], writable=False)
    assert await run(sandbox, f"cat {UPLOADS}/a") == (0, "in its place")
    # Two levels: what the removed file leaves is a directory of empty directories.
    deep = [MountFile("n/m/f", b"below")]
    await mounts.put(sandbox_id, config, UPLOADS, deep, writable=False)
    await mounts.remove(sandbox_id, UPLOADS, ["n/m/f"])
    await mounts.put(sandbox_id, config, UPLOADS, [MountFile("n", b"flat")], writable=False)
    assert await run(sandbox, f"cat {UPLOADS}/n") == (0, "flat")
    for path in ("n" * 256, "d" * 256 + "/f"):
        with pytest.raises(InvalidArgument, match="longer than 255 bytes"):
            await mounts.put(sandbox_id, config, UPLOADS, [MountFile(path, b"x")], writable=False)
    await mounts.put(sandbox_id, config, UPLOADS, [MountFile("full/f", b"f")], writable=False)
    with pytest.raises(InvalidArgument, match="is a directory"):
        await mounts.put(sandbox_id, config, UPLOADS, [MountFile("full", b"x")], writable=False)
    with pytest.raises(InvalidArgument, match="not a directory"):
        await mounts.put(sandbox_id, config, UPLOADS, [MountFile("a/c", b"x")], writable=False)
    assert await run(sandbox, f"ls -A {UPLOADS}") == (0, "a\nfull\nn\n")


async def test_the_file_tools_see_the_skills_as_bash_does_and_cannot_change_them(
    client: HostClient,
) -> None:
    """The body binds the skills read-only at /workspace/skills, over the
    workspace directory: read, glob and grep find them there, and a write is
    refused, never made to a hidden copy under them."""
    sandbox = HostSandbox(client, new_id(), config(skills=True))
    mounts = mounts_of(client)
    skill = [MountFile("pdf/SKILL.md", b"---\ndescription: Fills PDFs.\n---\nUse fill.py\n")]
    await mounts.put(sandbox.sandbox_id, sandbox.config, "/mnt/skills", skill, writable=False)
    try:
        shown = "/workspace/skills/pdf/SKILL.md"
        assert await run(sandbox, f"head -c 3 {shown}") == (0, "---")
        for path in (shown, "skills/pdf/SKILL.md", "skills/../skills/pdf/SKILL.md"):
            assert (await sandbox.read_file(path, max_bytes=1000)).endswith(b"Use fill.py\n")
        assert (await sandbox.glob("*/*.md", "/workspace/skills")).paths == (shown,)
        assert (await sandbox.grep("fill", "skills")).lines == (f"{shown}:4:Use fill.py",)
        for path in (shown, "skills/new.txt"):
            with pytest.raises(FileError, match="read-only"):
                await sandbox.write_file(path, b"EVIL")
        assert await run(sandbox, f"cat {shown} | tail -1; ls -A /workspace") == (
            0,
            "Use fill.py\nskills\n",
        )
        with pytest.raises(PathOutsideWorkspace):
            await sandbox.read_file("/workspace/skills/../../etc/passwd", max_bytes=10)
    finally:
        await client.destroy(sandbox.sandbox_id)


async def test_the_file_tools_reach_the_mounts_with_the_sandbox_user_s_rights(
    sandbox: HostSandbox, client: HostClient, host: HostProcess
) -> None:
    """read, write, glob and grep see /mnt as bash does: uploads are read and
    not changed, outputs (a writable mount) are written as the sandbox user,
    and a link the sandbox plants there leads nowhere outside the mount tree."""
    mounts = mounts_of(client)
    sandbox_id, config = sandbox.sandbox_id, sandbox.config
    await mounts.put(
        sandbox_id, config, UPLOADS, [MountFile("notes.txt", b"alpha\n")], writable=False
    )
    await mounts.put(sandbox_id, config, OUTPUTS, [], writable=True)
    assert await sandbox.read_file(f"{UPLOADS}/notes.txt", max_bytes=100) == b"alpha\n"
    assert (await sandbox.grep("alpha", "/mnt/session")).lines == (f"{UPLOADS}/notes.txt:1:alpha",)
    for path in (f"{UPLOADS}/notes.txt", f"{UPLOADS}/new.txt", "/mnt/made-here.txt"):
        with pytest.raises(FileError, match="ermission denied"):
            await sandbox.write_file(path, b"EVIL")
    await sandbox.write_file(f"{OUTPUTS}/charts/result.txt", b"done\n")
    assert (await sandbox.glob("**/*.txt", OUTPUTS)).paths == (f"{OUTPUTS}/charts/result.txt",)
    assert [(f.path, f.size) for f in (await mounts.listing(sandbox_id, OUTPUTS)).files] == [
        ("charts/result.txt", 5)
    ]
    assert await run(
        sandbox, f"stat -c %U {OUTPUTS}/charts/result.txt; cat {UPLOADS}/notes.txt"
    ) == (
        0,
        f"{(await run(sandbox, 'id -un'))[1].strip()}\nalpha\n",
    )
    code, output = await run(sandbox, f"ln -s /etc {OUTPUTS}/etc && ln -s / {OUTPUTS}/root")
    assert code == 0, output
    for path in (f"{OUTPUTS}/etc/passwd", f"{OUTPUTS}/root/etc/passwd", "/mnt/../etc/passwd"):
        with pytest.raises(PathOutsideWorkspace):
            await sandbox.read_file(path, max_bytes=100_000)
    with pytest.raises(PathOutsideWorkspace):
        await sandbox.write_file(f"{OUTPUTS}/root/tmp/planted", b"no")
    assert not (host.work_dir / "tmp" / "planted").exists()
