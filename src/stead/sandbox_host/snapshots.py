"""Workspace snapshots: a workspace directory as one tar + zstd object in the blob
store, and back (DESIGN rule 6). Touches only the workspace, a staging
directory beside it, and the one blob key it is given.

The archive work (``archive.py``: walking, compressing, hashing, extracting)
runs in a worker thread; chunks cross to the event loop through a channel of
``QUEUE_CHUNKS`` chunks of about ``CHUNK_BYTES``, so memory stays bounded
whatever the workspace's size. The workspace is written by untrusted sandbox
code, so on restore the archive is untrusted too (see ``archive.py``).

SnapshotError          base (a ``SandboxError``); not retryable
├── SnapshotMissing    no object under the snapshot's key
└── SnapshotCorrupt    the stored object is not what was written or recorded (size,
                       sha256), or not an archive a snapshot could be

Blob store failures other than a missing object propagate as ``stead.blobs``
errors (``BlobUnavailable`` is retryable); local I/O failures as ``OSError``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar, Protocol, TypeVar

import anyio
from anyio import from_thread, to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from stead.blobs import PART_BYTES, BlobError, BlobNotFound, BlobStore
from stead.failpoints import FailPoints
from stead.sandbox import SandboxError
from stead.sandbox_host.archive import ArchiveError, extract_archive, write_archive
from stead.sandbox_host.trees import remove_tree

QUEUE_CHUNKS = 8
"""Chunks (of about ``CHUNK_BYTES``) waiting between the thread and the loop."""
STAGING_PREFIX = ".restore-"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100

R = TypeVar("R")
T = TypeVar("T")
Chunk = bytes | None
"""What crosses the channel: compressed bytes, then None once the sender has
finished successfully. A channel closed without None means the sender failed."""


class SnapshotError(SandboxError):
    """Base of the snapshot errors."""

    retryable: ClassVar[bool] = False


class SnapshotMissing(SnapshotError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"snapshot {key!r} is missing from the blob store")


class SnapshotCorrupt(SnapshotError):
    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        self.reason = reason
        super().__init__(f"snapshot {key!r} is corrupt: {reason}")


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    key: str
    size: int
    """Compressed bytes stored."""
    sha256: str
    """Hex digest of the compressed bytes."""


async def take_snapshot(
    workspace: Path, blobs: BlobStore, key: str, *, failpoints: FailPoints | None = None
) -> SnapshotInfo:
    """Archives ``workspace`` (regular files, directories, symlinks as symlinks,
    modes and mtimes; sockets, FIFOs and devices are skipped, hard links kept
    as links) to ``key``, then reads the object back to verify its size
    and sha256. Never follows a symlink. Raises ``SnapshotCorrupt`` (and deletes
    the object) if the store does not give back what was written. If cancelled
    or failed before the upload completes, no object is written."""
    send, receive = anyio.create_memory_object_stream[Chunk](QUEUE_CHUNKS)

    async def upload() -> None:
        async with contextlib.aclosing(_until_done(receive, failpoints)) as chunks:
            await blobs.put_stream(key, chunks)

    (size, sha256), _ = await _beside_thread(
        partial(_write, workspace, send), send, upload, receive
    )
    info = SnapshotInfo(key, size, sha256)
    try:
        await _verify_stored(blobs, info)
    except SnapshotCorrupt:
        with contextlib.suppress(BlobError):
            await blobs.delete(key)
        raise
    return info


async def restore_snapshot(
    blobs: BlobStore, info: SnapshotInfo, target: Path, *, owner: tuple[int, int] | None
) -> None:
    """Replaces ``target`` with the snapshot's tree, in one rename once the whole
    object has been extracted and its size and sha256 match ``info``. Entries
    (``target`` included) are chowned to ``owner`` (uid, gid) when given.
    Raises ``SnapshotMissing`` or ``SnapshotCorrupt``; on any failure or
    cancellation ``target`` is untouched and the staging directory removed."""
    try:
        chunks = await blobs.get_stream(info.key)
    except BlobNotFound:
        raise SnapshotMissing(info.key) from None
    staging = Path(await to_thread.run_sync(_make_staging, target))
    try:
        send, receive = anyio.create_memory_object_stream[Chunk](QUEUE_CHUNKS)

        async def download() -> None:
            async for chunk in chunks:
                await send.send(chunk)
            await send.send(None)

        source = _ChunkSource(receive, info)
        extract = partial(_extract, source, staging, owner, info.key)
        await _beside_thread(extract, receive, download, send)
        await to_thread.run_sync(_swap_into_place, staging, target)
    finally:
        # After the swap ``staging`` holds the replaced tree, if there was one.
        with anyio.CancelScope(shield=True):
            await to_thread.run_sync(_remove, staging)


# -- plumbing between the loop and the worker thread ---------------------------


class _Closable(Protocol):
    def close(self) -> None: ...


async def _beside_thread(
    work: Callable[[], R],
    work_end: _Closable,
    main: Callable[[], Awaitable[T]],
    main_end: _Closable,
) -> tuple[R, T]:
    """Runs blocking ``work`` in a worker thread while awaiting ``main``; each side
    closes its end of their channel when it stops. The first failure cancels the
    other side and is raised as itself: a task group would wrap it in an
    ExceptionGroup, and the other side's consequent error would hide it."""
    worked: list[R] = []
    awaited: list[T] = []
    errors: list[Exception] = []

    async def run_work() -> None:
        try:
            worked.append(await to_thread.run_sync(work))
        except Exception as exc:
            errors.append(exc)
            tasks.cancel_scope.cancel()
        finally:
            work_end.close()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run_work)
        try:
            awaited.append(await main())
        except Exception as exc:
            errors.append(exc)
            tasks.cancel_scope.cancel()
        finally:
            main_end.close()
    if errors:
        raise errors[0]
    return worked[0], awaited[0]


async def _until_done(
    receive: MemoryObjectReceiveStream[Chunk], failpoints: FailPoints | None
) -> AsyncGenerator[bytes, None]:
    sent = 0
    async for chunk in receive:
        if chunk is None:
            return
        if failpoints is not None and sent > PART_BYTES:
            # The writer took a part's worth: the upload in parts has begun.
            failpoints.hit("snapshot.mid_upload")
        sent += len(chunk)
        yield chunk
    # The archiver failed; its own error is raised by ``_beside_thread``. Raising
    # here makes sure the upload is abandoned, never committed short.
    raise RuntimeError("archive ended before it was complete")


async def _verify_stored(blobs: BlobStore, info: SnapshotInfo) -> None:
    stored = await blobs.head(info.key)
    if stored is None:
        raise SnapshotCorrupt(info.key, "the object vanished after the upload")
    if stored.size != info.size:
        raise SnapshotCorrupt(info.key, f"stored {stored.size} bytes, wrote {info.size}")
    digest = hashlib.sha256()
    try:
        async for chunk in await blobs.get_stream(info.key):
            await to_thread.run_sync(digest.update, chunk)
    except BlobNotFound:
        raise SnapshotCorrupt(info.key, "the object vanished after the upload") from None
    if digest.hexdigest() != info.sha256:
        raise SnapshotCorrupt(info.key, "the stored bytes differ from those written")


# -- the worker thread's side --------------------------------------------------


class _ChunkSink:
    """The compressor's output: hashed, counted and handed to the event loop,
    waiting while the channel is full."""

    def __init__(self, send: MemoryObjectSendStream[Chunk]) -> None:
        self._send = send
        self.size = 0
        self.digest = hashlib.sha256()

    def write(self, data: bytes) -> int:
        if data:
            chunk = bytes(data)
            self.digest.update(chunk)
            self.size += len(chunk)
            from_thread.run(self._send.send, chunk)
        return len(data)


def _write(workspace: Path, send: MemoryObjectSendStream[Chunk]) -> tuple[int, str]:
    sink = _ChunkSink(send)
    write_archive(workspace, sink)
    from_thread.run(send.send, None)
    return sink.size, sink.digest.hexdigest()


class _ChunkSource:
    """The downloaded object as a file for the decompressor, hashed and counted
    as it arrives; a chunk is asked of the event loop only when needed."""

    def __init__(self, receive: MemoryObjectReceiveStream[Chunk], info: SnapshotInfo) -> None:
        self._receive = receive
        self._info = info
        self._buffer = memoryview(b"")
        self._done = False
        self._size = 0
        self._digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        while not self._buffer and not self._done:
            self._next()
        size = len(self._buffer) if size < 0 else size
        piece, self._buffer = self._buffer[:size], self._buffer[size:]
        return bytes(piece)

    def verify(self) -> None:
        """Reads what the archive did not need, then checks size and digest."""
        while not self._done:
            self._buffer = memoryview(b"")
            self._next()
        if self._size != self._info.size:
            raise SnapshotCorrupt(self._info.key, f"{self._size} bytes, recorded {self._info.size}")
        if self._digest.hexdigest() != self._info.sha256:
            raise SnapshotCorrupt(self._info.key, "sha256 differs from the recorded one")

    def _next(self) -> None:
        chunk = from_thread.run(self._receive.receive)
        if chunk is None:
            self._done = True
            return
        self._size += len(chunk)
        if self._size > self._info.size:
            raise SnapshotCorrupt(self._info.key, f"more than the recorded {self._info.size} bytes")
        self._digest.update(chunk)
        self._buffer = memoryview(chunk)


def _extract(source: _ChunkSource, staging: Path, owner: tuple[int, int] | None, key: str) -> None:
    try:
        extract_archive(source, staging, owner)
    except ArchiveError as exc:
        # Bytes that are not what was recorded explain a broken archive best.
        source.verify()
        raise SnapshotCorrupt(key, str(exc)) from None
    source.verify()


def remove_stale_staging(parent: Path) -> int:
    """Removes restores' staging directories left in ``parent`` by a process
    killed mid-restore; call only while no restore there can be running.
    Returns how many there were."""
    removed = 0
    for staging in parent.glob(f"{STAGING_PREFIX}*"):
        remove_tree(staging, ignore_errors=True)
        removed += 1
    return removed


def _make_staging(target: Path) -> str:
    return tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=target.parent)


def _swap_into_place(staging: Path, target: Path) -> None:
    """Puts ``staging`` at ``target`` in one step; a tree that was at ``target``
    ends up at ``staging``. Readers see the old tree or the new, never neither."""
    try:
        os.rename(staging, target)  # no target, or an empty directory
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
            raise
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.renameat2(
        _AT_FDCWD, os.fsencode(staging), _AT_FDCWD, os.fsencode(target), _RENAME_EXCHANGE
    )
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), target.name)


def _remove(path: Path) -> None:
    remove_tree(path)
