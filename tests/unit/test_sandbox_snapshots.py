"""Workspace snapshots: round trips through a local blob directory and a real S3
server, verification on both ends, and restores of hostile archives."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import random
import stat
import tarfile
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterator
from pathlib import Path

import anyio
import pytest
import zstandard
from obstore.store import LocalStore

from stead.blobs import BlobConfig, BlobInfo, BlobStore, open_blob_store
from stead.sandbox import SandboxError
from stead.sandbox_host.snapshots import (
    SnapshotCorrupt,
    SnapshotInfo,
    SnapshotMissing,
    remove_stale_staging,
    restore_snapshot,
    take_snapshot,
)
from stead.testing.seaweed import S3Server, seaweed_s3

pytestmark = pytest.mark.anyio

OWNER = (2_000_123, 2_000_124)
WAIT = 10.0
"""Hang guard for waits on events the test itself causes."""
KEY = "snapshots/sbx_1/snap.tar.zst"
Tree = dict[str, tuple[object, ...]]


@pytest.fixture
def blob_dir(tmp_path: Path) -> Path:
    return tmp_path / "blobs"


@pytest.fixture
def blobs(blob_dir: Path) -> BlobStore:
    return open_blob_store(BlobConfig(url=f"file://{blob_dir}"))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace that no snapshot may read or write."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("secret")
    return path


def describe(root: Path) -> Tree:
    """Every entry under ``root`` (not following symlinks): kind, mode, mtime in
    nanoseconds, and the content hash or link target."""
    tree: Tree = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                tree[rel] = ("link", os.readlink(path), st.st_mtime_ns)
            elif stat.S_ISDIR(st.st_mode):
                tree[rel] = ("dir", stat.S_IMODE(st.st_mode), st.st_mtime_ns)
            elif stat.S_ISREG(st.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                tree[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_mtime_ns, digest)
            else:
                tree[rel] = ("special",)
    return tree


def make_workspace(root: Path, outside: Path) -> None:
    """Files, empty and read-only directories, every kind of symlink, exec bits,
    odd names, hard links and the special files a snapshot leaves out."""
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "main.py").write_text("print('hi')\n")
    (root / "src" / "empty").mkdir()
    (root / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "private").write_bytes(b"\x00\x01" * 1000)
    os.chmod(root / "private", 0o640)
    (root / ("long-" + "n" * 120)).write_text("a name longer than ustar allows")
    (root / os.fsdecode(b"caf\xe9-not-utf8")).write_text("latin-1 name")
    (root / "hard1").write_text("shared inode")
    os.link(root / "hard1", root / "hard2")
    (root / "readonly").mkdir()
    (root / "readonly" / "inside.txt").write_text("in a 0555 directory")
    os.symlink("src/pkg/main.py", root / "link-inside")
    os.symlink("src", root / "link-to-dir")
    os.symlink("does/not/exist", root / "dangling")
    os.symlink(str(outside), root / "link-outside")
    os.symlink("../outside/secret.txt", root / "link-up-and-out")
    os.mkfifo(root / "fifo")
    os.mknod(root / "socket", stat.S_IFSOCK | 0o600)
    with contextlib.suppress(PermissionError):  # no CAP_MKNOD in some containers
        os.mknod(root / "device", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    os.utime(root / "run.sh", ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))
    os.utime(root / "private", ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
    os.chmod(root / "readonly", 0o555)


def without_special(tree: Tree) -> Tree:
    return {path: entry for path, entry in tree.items() if entry[0] != "special"}


def owners(root: Path) -> set[tuple[int, int]]:
    paths = [root, *(Path(d, n) for d, ds, fs in os.walk(root) for n in ds + fs)]
    return {(p.lstat().st_uid, p.lstat().st_gid) for p in paths}


def staging_left(parent: Path) -> list[str]:
    return [name for name in os.listdir(parent) if name.startswith(".restore-")]


async def test_round_trip_keeps_the_tree_and_applies_the_owner(
    tmp_path: Path, blobs: BlobStore, outside: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir(mode=0o751)
    make_workspace(workspace, outside)
    before = describe(workspace)
    root_before = workspace.stat()

    info = await take_snapshot(workspace, blobs, KEY)
    stored = await blobs.get_bytes(KEY)
    assert (info.key, info.size, info.sha256) == (
        KEY,
        len(stored),
        hashlib.sha256(stored).hexdigest(),
    )
    target = tmp_path / "restored"
    await restore_snapshot(blobs, info, target, owner=OWNER)

    assert describe(target) == without_special(before)
    assert {"fifo", "socket"} <= set(before) - set(describe(target))
    assert os.readlink(target / "link-outside") == str(outside)
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert target.stat().st_mtime_ns == root_before.st_mtime_ns
    assert owners(target) == {OWNER}
    assert os.listdir(outside) == ["secret.txt"]
    assert staging_left(tmp_path) == []
    # One file of two names is one file again, not two copies.
    assert (target / "hard1").stat().st_ino == (target / "hard2").stat().st_ino


async def test_no_owner_leaves_entries_to_the_restoring_user(
    tmp_path: Path, blobs: BlobStore, outside: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    make_workspace(workspace, outside)
    os.chown(workspace / "private", *OWNER)  # archived without its owner
    info = await take_snapshot(workspace, blobs, KEY)
    await restore_snapshot(blobs, info, tmp_path / "restored", owner=None)
    assert owners(tmp_path / "restored") == {(os.getuid(), os.getgid())}


async def test_round_trip_of_a_50_mb_tree(tmp_path: Path, blobs: BlobStore) -> None:
    workspace = tmp_path / "ws"
    rng = random.Random(50)
    words = [rng.randbytes(rng.randint(2, 9)).hex().encode() for _ in range(500)]
    total = 0
    index = 0
    while total < 50 * 1024 * 1024:
        folder = workspace / f"d{index % 17}" / f"e{index % 5}"
        folder.mkdir(parents=True, exist_ok=True)
        size = rng.choice([300, 4_000, 60_000, 700_000, 3_000_000])
        if index % 3:
            data = rng.randbytes(size)
        else:  # compressible, like source or logs
            data = b" ".join(rng.choices(words, k=size // 8))[:size]
        (folder / f"f{index}.bin").write_bytes(data)
        total += size
        index += 1
    before = describe(workspace)

    info = await take_snapshot(workspace, blobs, KEY)
    await restore_snapshot(blobs, info, tmp_path / "restored", owner=OWNER)

    assert describe(tmp_path / "restored") == before


async def test_restore_replaces_an_existing_target(tmp_path: Path, blobs: BlobStore) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "new.txt").write_text("new")
    info = await take_snapshot(workspace, blobs, KEY)
    target = tmp_path / "target"
    (target / "old" / "deep").mkdir(parents=True)
    (target / "old" / "deep" / "stale.txt").write_text("stale")

    await restore_snapshot(blobs, info, target, owner=None)

    assert sorted(os.listdir(target)) == ["new.txt"]
    assert staging_left(tmp_path) == []


@pytest.fixture
async def existing_target(tmp_path: Path) -> Path:
    """A restored workspace already in place, which a failed restore must keep."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep.txt").write_text("the current workspace")
    return target


def assert_untouched(target: Path) -> None:
    assert os.listdir(target) == ["keep.txt"]
    assert (target / "keep.txt").read_text() == "the current workspace"
    assert staging_left(target.parent) == []


async def small_snapshot(tmp_path: Path, blobs: BlobStore) -> SnapshotInfo:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for i in range(40):
        (workspace / f"f{i}").write_bytes(os.urandom(64 * 1024))
    return await take_snapshot(workspace, blobs, KEY)


@pytest.mark.parametrize("same_size", [True, False])
async def test_a_corrupt_blob_is_refused_and_the_target_kept(
    tmp_path: Path, blobs: BlobStore, existing_target: Path, same_size: bool
) -> None:
    info = await small_snapshot(tmp_path, blobs)
    other = os.urandom(info.size if same_size else info.size // 2)
    await blobs.put_bytes(KEY, other)
    with pytest.raises(SnapshotCorrupt) as caught:
        await restore_snapshot(blobs, info, existing_target, owner=OWNER)
    assert caught.value.key == KEY
    assert not caught.value.retryable
    assert_untouched(existing_target)


async def test_a_wrong_recorded_digest_is_refused(
    tmp_path: Path, blobs: BlobStore, existing_target: Path
) -> None:
    info = await small_snapshot(tmp_path, blobs)
    wrong = SnapshotInfo(info.key, info.size, hashlib.sha256(b"other").hexdigest())
    with pytest.raises(SnapshotCorrupt, match="sha256"):
        await restore_snapshot(blobs, wrong, existing_target, owner=None)
    assert_untouched(existing_target)


async def test_a_missing_blob(blobs: BlobStore, existing_target: Path) -> None:
    info = SnapshotInfo("snapshots/none.tar.zst", 10, "0" * 64)
    with pytest.raises(SnapshotMissing) as caught:
        await restore_snapshot(blobs, info, existing_target, owner=None)
    assert isinstance(caught.value, SandboxError) and not caught.value.retryable
    assert_untouched(existing_target)


class Tampering(BlobStore):
    """A local store whose downloads pass through ``change``; or stall forever
    after the first chunk (``stalled`` is set then) when ``change`` is None."""

    def __init__(self, root: Path, change: Callable[[bytes], bytes] | None) -> None:
        super().__init__(LocalStore(prefix=root, mkdir=True), timeout_seconds=30.0)
        self._change = change
        self.stalled = anyio.Event()

    async def get_stream(self, key: str) -> AsyncIterator[bytes]:
        chunks = await super().get_stream(key)

        change = self._change

        async def changed() -> AsyncIterator[bytes]:
            async for chunk in chunks:
                if change is None:
                    yield chunk
                    self.stalled.set()
                    await anyio.sleep_forever()
                else:
                    yield change(chunk)

        return changed()


async def test_a_snapshot_the_store_returns_changed_is_refused_and_deleted(
    tmp_path: Path, blob_dir: Path
) -> None:
    blobs = Tampering(blob_dir, lambda chunk: bytes([chunk[0] ^ 1]) + chunk[1:])
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a")
    with pytest.raises(SnapshotCorrupt, match="differ"):
        await take_snapshot(workspace, blobs, KEY)
    assert await blobs.head(KEY) is None


async def test_a_cancelled_restore_keeps_the_target(
    tmp_path: Path, blobs: BlobStore, blob_dir: Path, existing_target: Path
) -> None:
    info = await small_snapshot(tmp_path, blobs)
    stalling = Tampering(blob_dir, None)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: restore_snapshot(stalling, info, existing_target, owner=None))
        with anyio.fail_after(WAIT):
            await stalling.stalled.wait()
        tasks.cancel_scope.cancel()
    assert_untouched(existing_target)


class StallingUpload(BlobStore):
    """A local store whose uploads take the first chunk, then wait forever."""

    def __init__(self, root: Path) -> None:
        super().__init__(LocalStore(prefix=root, mkdir=True), timeout_seconds=30.0)
        self.stalled = anyio.Event()

    async def put_stream(self, key: str, chunks: AsyncIterable[bytes]) -> BlobInfo:
        async def first_then_stall() -> AsyncIterator[bytes]:
            async for chunk in chunks:
                yield chunk
                break
            self.stalled.set()
            await anyio.sleep_forever()

        return await super().put_stream(key, first_then_stall())


async def test_a_cancelled_snapshot_writes_no_object(tmp_path: Path, blob_dir: Path) -> None:
    blobs = StallingUpload(blob_dir)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # Far more than the channel holds, so the archiving thread is blocked on it.
    (workspace / "random.bin").write_bytes(os.urandom(24 * 1024 * 1024))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(take_snapshot, workspace, blobs, KEY)
        with anyio.fail_after(WAIT):
            await blobs.stalled.wait()
        tasks.cancel_scope.cancel()
    assert await blobs.head(KEY) is None
    assert await blobs.list() == []


async def test_an_unreadable_workspace_writes_no_object(tmp_path: Path, blobs: BlobStore) -> None:
    with pytest.raises(FileNotFoundError):
        await take_snapshot(tmp_path / "missing", blobs, KEY)
    assert await blobs.head(KEY) is None


def member(name: str, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for field, value in fields.items():
        setattr(info, field, value)
    return info


def hostile_archives(outside: Path) -> Iterator[tuple[str, list[tarfile.TarInfo]]]:
    root = member(".", tarfile.DIRTYPE, mode=0o755)
    yield "dot-dot", [root, member("../escape.txt")]
    yield "nested dot-dot", [root, member("a", tarfile.DIRTYPE), member("a/../../escape.txt")]
    yield "absolute", [root, member(f"{outside}/absolute.txt")]
    yield (
        "through an absolute symlink",
        [
            root,
            member("link", tarfile.SYMTYPE, linkname=str(outside)),
            member("link/through.txt"),
        ],
    )
    yield (
        "through a relative symlink",
        [
            root,
            member("up", tarfile.SYMTYPE, linkname="../outside"),
            member("up/through.txt"),
        ],
    )
    yield (
        "over a symlink",
        [
            root,
            member("secret.txt", tarfile.SYMTYPE, linkname=str(outside / "secret.txt")),
            member("secret.txt"),
        ],
    )
    yield (
        "symlink over a directory",
        [
            root,
            member("d", tarfile.DIRTYPE),
            member("d", tarfile.SYMTYPE, linkname=str(outside)),
            member("d/x.txt"),
        ],
    )
    yield "hard link", [root, member("hard", tarfile.LNKTYPE, linkname=str(outside / "secret.txt"))]
    yield (
        "hard link to a symlink",
        [
            root,
            member("out", tarfile.SYMTYPE, linkname=str(outside / "secret.txt")),
            member("hard", tarfile.LNKTYPE, linkname="out"),
        ],
    )
    yield (
        "hard link up and out",
        [root, member("hard", tarfile.LNKTYPE, linkname="../outside/secret.txt")],
    )
    yield "device", [root, member("null", tarfile.CHRTYPE, devmajor=1, devminor=3)]
    yield "fifo", [root, member("fifo", tarfile.FIFOTYPE)]
    yield "root as a symlink", [member(".", tarfile.SYMTYPE, linkname=str(outside))]


def tar_zst(members: list[tarfile.TarInfo]) -> bytes:
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info in members:
            data = b"written by a hostile archive" if info.isreg() else b""
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return zstandard.ZstdCompressor().compress(plain.getvalue())


HOSTILE = (
    "dot-dot",
    "nested dot-dot",
    "absolute",
    "through an absolute symlink",
    "through a relative symlink",
    "over a symlink",
    "symlink over a directory",
    "hard link",
    "hard link to a symlink",
    "hard link up and out",
    "device",
    "fifo",
    "root as a symlink",
)


def test_every_hostile_archive_is_tested(outside: Path) -> None:
    assert tuple(name for name, _ in hostile_archives(outside)) == HOSTILE


@pytest.mark.parametrize("name", HOSTILE)
async def test_a_hostile_archive_is_refused_and_writes_nothing_outside(
    tmp_path: Path, blobs: BlobStore, outside: Path, name: str
) -> None:
    data = tar_zst(dict(hostile_archives(outside))[name])
    await blobs.put_bytes(KEY, data)
    info = SnapshotInfo(KEY, len(data), hashlib.sha256(data).hexdigest())
    target = tmp_path / "restored"

    with pytest.raises(SnapshotCorrupt):
        await restore_snapshot(blobs, info, target, owner=OWNER)

    assert not target.exists(), name
    assert sorted(os.listdir(outside)) == ["secret.txt"], name
    assert (outside / "secret.txt").read_text() == "secret", name
    assert sorted(os.listdir(tmp_path)) == ["blobs", "outside"], name


async def test_bytes_that_are_no_archive_are_refused(tmp_path: Path, blobs: BlobStore) -> None:
    data = os.urandom(5000)
    await blobs.put_bytes(KEY, data)
    info = SnapshotInfo(KEY, len(data), hashlib.sha256(data).hexdigest())
    with pytest.raises(SnapshotCorrupt, match=r"not a tar\.zst"):
        await restore_snapshot(blobs, info, tmp_path / "restored", owner=None)
    assert not (tmp_path / "restored").exists()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    with seaweed_s3() as server:
        yield server


async def test_round_trip_through_s3(tmp_path: Path, s3_server: S3Server, outside: Path) -> None:
    blobs = open_blob_store(
        BlobConfig(
            url=s3_server.url(f"snapshots-{uuid.uuid4().hex}"),
            s3_endpoint=s3_server.endpoint,
            s3_region=s3_server.region,
            s3_access_key_id=s3_server.access_key_id,
            s3_secret_access_key=s3_server.secret_access_key,
        )
    )
    workspace = tmp_path / "ws"
    workspace.mkdir()
    make_workspace(workspace, outside)
    # Incompressible and over two upload parts: a multipart upload.
    (workspace / "big.bin").write_bytes(os.urandom(20 * 1024 * 1024))
    before = describe(workspace)

    info = await take_snapshot(workspace, blobs, KEY)
    head = await blobs.head(KEY)
    assert head is not None and head.size == info.size
    await restore_snapshot(blobs, info, tmp_path / "restored", owner=OWNER)

    assert describe(tmp_path / "restored") == without_special(before)
    assert owners(tmp_path / "restored") == {OWNER}


def test_staging_left_by_a_killed_restore_is_removed_and_nothing_else(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "keep").mkdir(parents=True)
    for name in (".restore-a1", ".restore-b2"):
        (tmp_path / name / "deep").mkdir(parents=True)
        (tmp_path / name / "deep" / "file").write_bytes(b"half extracted")
        os.symlink(workspace, tmp_path / name / "link")  # followed, it would remove keep
    (tmp_path / "restore-not-staging").mkdir()
    assert remove_stale_staging(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["restore-not-staging", "workspace"]
    assert (workspace / "keep").is_dir()
