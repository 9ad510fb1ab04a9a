"""File primitives on a host workspace: stat, list, read, read a line range, write.

Blocking: a backend runs them in a worker thread. Each takes the caller's path
(for messages), confines it with ``WorkspacePaths`` first, and acts with the
rights of the workspace's user (``WorkspacePaths.uid``), never root's. Files are opened
with ``O_NOFOLLOW`` (the resolved leaf is never a symlink) and ``O_NONBLOCK``
(a FIFO swapped in cannot hang the open); the type is checked on the open
descriptor, and every descriptor is closed on every path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import update_wrapper
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from stead.sandbox.base import LIST_ENTRY_LIMIT, DirEntry, DirListing, FileInfo, FileKind
from stead.sandbox.errors import FileError, FileTooLarge, NotARegularFile, RangeTooLarge
from stead.sandbox.local.actas import acting_as
from stead.sandbox.local.paths import (
    WorkspacePaths,
    file_error,
    make_parents_beneath,
    open_beneath,
)

CHUNK = 64 * 1024
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# No O_TRUNC: the file is checked to be a regular one first (O_NONBLOCK: a
# FIFO swapped in cannot hang the open), then truncated.
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

P = ParamSpec("P")
T = TypeVar("T")


def _as_owner(
    operation: Callable[Concatenate[WorkspacePaths, P], T],
) -> Callable[Concatenate[WorkspacePaths, P], T]:
    """Runs ``operation`` with the rights of ``paths.uid`` (what it creates is
    that user's too)."""

    def run(paths: WorkspacePaths, /, *args: P.args, **kwargs: P.kwargs) -> T:
        with acting_as(paths.uid):
            return operation(paths, *args, **kwargs)

    update_wrapper(run, operation)
    return run


@_as_owner
def stat_path(paths: WorkspacePaths, path: str) -> FileInfo:
    target = paths.resolve(path)
    try:
        fd = open_beneath(paths.root, target, os.O_PATH)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise file_error(path, exc) from None
    return FileInfo(paths.show(target), _kind(st.st_mode), st.st_size, st.st_mtime)


@_as_owner
def list_dir(paths: WorkspacePaths, path: str, limit: int = LIST_ENTRY_LIMIT) -> DirListing:
    """The directory's entries by name, the first ``limit`` of them; symlinks
    are listed as such, never followed."""
    target = paths.resolve(path)
    try:
        fd = open_beneath(paths.root, target, os.O_RDONLY | os.O_DIRECTORY)
    except NotADirectoryError:
        raise FileError(path, "not a directory") from None
    except OSError as exc:
        raise file_error(path, exc) from None
    entries: list[DirEntry] = []
    try:
        names = sorted(os.listdir(fd))
        for name in names[:limit]:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:  # removed since the listing
                continue
            entries.append(DirEntry(name, _kind(st.st_mode), st.st_size, st.st_mtime))
    except OSError as exc:
        raise file_error(path, exc) from None
    finally:
        os.close(fd)
    return DirListing(paths.show(target), tuple(entries), len(names))


def _kind(mode: int) -> FileKind:
    if stat.S_ISREG(mode):
        return FileKind.FILE
    if stat.S_ISDIR(mode):
        return FileKind.DIRECTORY
    if stat.S_ISLNK(mode):
        return FileKind.SYMLINK
    return FileKind.OTHER


@_as_owner
def read_file(paths: WorkspacePaths, path: str, max_bytes: int) -> bytes:
    with _open_regular(paths, path) as (fd, size):
        if size > max_bytes:
            raise FileTooLarge(path, size, max_bytes)
        data = _read_at_most(fd, max_bytes + 1)
    if len(data) > max_bytes:  # grew after the size check
        raise FileTooLarge(path, len(data), max_bytes)
    return data


@_as_owner
def read_lines(paths: WorkspacePaths, path: str, start: int, end: int, max_bytes: int) -> bytes:
    """Lines ``start..end`` (1-based, inclusive; ``end <= 0``: to the end), raw.

    Streams the file: lines before the range are skipped without being kept,
    and reading stops at the end of the range or once it holds ``max_bytes``.
    """
    first = max(1, start)
    last = end if end > 0 else None
    collected = bytearray()
    line = 1
    with _open_regular(paths, path) as (fd, _):
        while last is None or line <= last:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                break
            pos = 0
            while pos < len(chunk) and (last is None or line <= last):
                newline = chunk.find(b"\n", pos)
                stop = len(chunk) if newline < 0 else newline + 1
                if line >= first:
                    collected += chunk[pos:stop]
                    if len(collected) > max_bytes:
                        raise RangeTooLarge(path, start, end, max_bytes)
                if newline < 0:
                    break
                line += 1
                pos = stop
    return bytes(collected)


@_as_owner
def write_file(paths: WorkspacePaths, path: str, data: bytes) -> None:
    target = paths.resolve(path)
    if target == paths.root:  # has no parent below the root to make
        raise FileError(path, "is a directory")
    try:
        make_parents_beneath(paths.root, target)
        fd, created = _open_for_write(paths.root, target)
    except IsADirectoryError:
        raise FileError(path, "is a directory") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise NotARegularFile(path) from None
        raise file_error(path, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(path)
        os.set_blocking(fd, True)
        _reserve(fd, st.st_size, len(data))
        # Over the old bytes, then cut to length: the blocks reserved above
        # stay the file's, where a truncation first would give them back.
        view, written = memoryview(data), 0
        while written < len(data):
            written += os.pwrite(fd, view[written:], written)
        os.ftruncate(fd, len(data))
    except OSError as exc:
        if created:
            # A refused write leaves no trace: not an empty file the agent
            # never had, which a later read or glob would take for its work.
            _unlink_beneath(paths.root, target)
        raise file_error(path, exc) from None
    finally:
        os.close(fd)


def _open_for_write(root: Path, target: Path) -> tuple[int, bool]:
    """The file at ``target`` opened for writing, made if missing, and whether
    this call made it."""
    try:
        return open_beneath(root, target, _WRITE_FLAGS | os.O_EXCL, 0o666), True
    except FileExistsError:
        return open_beneath(root, target, _WRITE_FLAGS, 0o666), False


def _unlink_beneath(root: Path, target: Path) -> None:
    """Removes the file ``target`` by its name in its directory, found with
    ``open_beneath``'s rules; never raises (the write's own error is the news)."""
    with contextlib.suppress(OSError):
        parent = open_beneath(root, target.parent, os.O_PATH | os.O_DIRECTORY)
        try:
            os.unlink(target.name, dir_fd=parent)
        finally:
            os.close(parent)


def _reserve(fd: int, size: int, length: int) -> None:
    """Allocates the blocks ``length`` bytes need before any old byte is
    overwritten, so a full disk (or quota) refuses the write with the file as
    it was; written first, it left the file cut short, the agent's file lost
    to a call that failed."""
    if length == 0:
        return
    try:
        os.posix_fallocate(fd, 0, length)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            return  # a file system that cannot say ahead: the write finds out
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)  # a partial allocation may have grown it
        raise


@contextmanager
def _open_regular(paths: WorkspacePaths, path: str) -> Iterator[tuple[int, int]]:
    """An open descriptor of the regular file at ``path`` and its size."""
    target: Path = paths.resolve(path)
    try:
        fd = open_beneath(paths.root, target, _READ_FLAGS)
    except OSError as exc:
        raise file_error(path, exc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(path)
        os.set_blocking(fd, True)
        yield fd, st.st_size
    except OSError as exc:
        raise file_error(path, exc) from None
    finally:
        os.close(fd)


def _read_at_most(fd: int, limit: int) -> bytes:
    parts: list[bytes] = []
    left = limit
    while left > 0 and (chunk := os.read(fd, min(CHUNK, left))):
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
