"""The tar + zstd format of workspace snapshots, written and read as streams.

Blocking; ``snapshots.py`` runs both directions in a worker thread. Written
with ``tarfile`` (PAX format), read with ``tarstream.py``. Writing
never follows a symlink: every entry is opened relative to its parent's open
descriptor with ``O_NOFOLLOW``. Reading trusts nothing in the archive (its
content comes from untrusted sandbox code): names must be plain relative paths,
only files, directories, symlinks and hard links to a file the archive made
before are accepted, every entry is created
relative to its parent's descriptor opened with ``O_NOFOLLOW``, so nothing is
ever written through a symlink, and nothing existing is overwritten. Symlinks
are restored as they were, wherever they point: they are data, never followed.
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
from pathlib import Path
from typing import IO, Protocol, cast

import zstandard

from stead.sandbox_host.tarstream import (
    BLOCK_DEVICE,
    CHAR_DEVICE,
    DIRECTORY,
    FIFO,
    HARD_LINK,
    Member,
    TarFormatError,
    TarStream,
)

CHUNK_BYTES = 1024 * 1024
SPARSE_BLOCK = 64 * 1024
"""A restored file's blocks of zeros this long are left as holes."""
_ZEROS = bytes(SPARSE_BLOCK)
ZSTD_LEVEL = 1
"""Fast: a snapshot is taken on every sleep, and restore speed barely depends on it."""
ZSTD_THREADS = 2
"""zstd compresses in its own threads while this one walks and writes tar
headers: about a third off the time of a snapshot on two cores."""
ROOT = "."
"""The archived name of the workspace directory itself."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO swapped in after the listing cannot hang the open.
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# What a hostile archive provokes when it reaches through a symlink, repeats or
# overwrites an entry, or writes under a directory it did not create.
_UNSAFE_ERRNOS = frozenset({errno.ELOOP, errno.ENOTDIR, errno.EEXIST, errno.ENOENT, errno.EISDIR})
_KINDS = {
    CHAR_DEVICE: "a character device",
    BLOCK_DEVICE: "a block device",
    FIFO: "a FIFO",
}


class ArchiveError(Exception):
    """The input is not a tar.zst archive ``write_archive`` could have written,
    or it places an entry somewhere unsafe. Names members as archived."""


class Writable(Protocol):
    def write(self, data: bytes, /) -> int: ...


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def write_archive(workspace: Path, out: Writable) -> None:
    """Writes the tree under ``workspace`` as tar.zst to ``out`` in writes of about
    ``CHUNK_BYTES``: regular files, directories and symlinks with modes and
    mtimes; no owners. Sockets, FIFOs and devices are left out; a file's
    further names in the tree are hard links to its first. If it raises, the
    end of the archive is never written, so a reader can tell the output is
    incomplete."""
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=ZSTD_THREADS)
    # ``out`` needs only ``write``; the stubs ask for a whole IO. Nothing is
    # closed on an error, so nothing more reaches ``out``. A plain TarFile in
    # "w" mode never seeks, so it streams without ``open``'s "w|" buffering.
    compressed = compressor.stream_writer(
        cast(IO[bytes], out), write_size=CHUNK_BYTES, closefd=False
    )
    tar = tarfile.TarFile(
        mode="w", fileobj=compressed, format=tarfile.PAX_FORMAT, copybufsize=CHUNK_BYTES
    )
    root_fd = os.open(workspace, _DIR_FLAGS)
    try:
        tar.addfile(_member(ROOT, os.fstat(root_fd), tarfile.DIRTYPE))
        _archive_tree(tar, root_fd, {})
    finally:
        os.close(root_fd)
    tar.close()  # the end-of-archive blocks
    compressed.flush(zstandard.FLUSH_FRAME)


def _archive_tree(tar: tarfile.TarFile, root_fd: int, links: dict[tuple[int, int], str]) -> None:
    """Depth first, names sorted, one open descriptor per level below the root,
    so a directory swapped for a symlink mid-walk is never entered."""
    stack: list[tuple[int, str, list[os.DirEntry[str]]]] = [(root_fd, "", _listing(root_fd))]
    try:
        while stack:
            dir_fd, prefix, entries = stack[-1]
            if not entries:
                stack.pop()
                if dir_fd != root_fd:
                    os.close(dir_fd)
                continue
            entry = entries.pop()
            try:
                child = _archive_entry(tar, dir_fd, entry, prefix + entry.name, links)
            except OSError as exc:
                # Gone or changed type since the listing: left out, like an
                # entry created after it.
                if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    raise
                continue
            if child is not None:
                stack.append((child, f"{prefix}{entry.name}/", _listing(child)))
    finally:
        for dir_fd, _, _ in stack:
            if dir_fd != root_fd:
                os.close(dir_fd)


def _listing(dir_fd: int) -> list[os.DirEntry[str]]:
    """The directory's entries, last name first: the walk pops from the end."""
    with os.scandir(dir_fd) as entries:
        return sorted(entries, key=lambda entry: entry.name, reverse=True)


def _archive_entry(
    tar: tarfile.TarFile,
    dir_fd: int,
    entry: os.DirEntry[str],
    name: str,
    links: dict[tuple[int, int], str],
) -> int | None:
    """Adds one entry; returns the open descriptor of a directory to descend into.
    ``links``: (device, inode) -> the archived name of each file of many names
    (stored once: as copies, a cache of hard links, as uv makes, took its size
    again at each wake)."""
    st = entry.stat(follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        member = _member(name, st, tarfile.SYMTYPE)
        member.linkname = os.readlink(entry.name, dir_fd=dir_fd)
        tar.addfile(member)
    elif stat.S_ISDIR(st.st_mode):
        fd = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
        try:
            tar.addfile(_member(name, os.fstat(fd), tarfile.DIRTYPE))
        except BaseException:
            os.close(fd)
            raise
        return fd
    elif stat.S_ISREG(st.st_mode):
        fd = os.open(entry.name, _READ_FLAGS, dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):  # not swapped for a FIFO or device
                first = links.get((st.st_dev, st.st_ino)) if st.st_nlink > 1 else None
                if first is not None:
                    member = _member(name, st, tarfile.LNKTYPE)
                    member.linkname = first
                    tar.addfile(member)
                    return None
                if st.st_nlink > 1:
                    links[(st.st_dev, st.st_ino)] = name
                member = _member(name, st, tarfile.REGTYPE)
                member.size = st.st_size
                tar.addfile(member, _ExactReader(fd, st.st_size))
        finally:
            os.close(fd)
    return None


def _member(name: str, st: os.stat_result, kind: bytes) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.mode = stat.S_IMODE(st.st_mode)
    # Nanoseconds as an exact decimal in a PAX record (a float loses the last
    # few hundred): build tools compare mtimes. Whole seconds need no record.
    seconds, nanos = divmod(st.st_mtime_ns, 1_000_000_000)
    member.mtime = seconds
    if nanos:
        member.pax_headers = {"mtime": f"{seconds}.{nanos:09d}"}
    # Ownership is the restorer's choice (``owner``), never the archive's.
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return member


class _ExactReader:
    """Exactly ``size`` bytes of a file, as the tar header promised: a file that
    grows while being read is cut, one that shrinks is padded with zeros. The
    holes of a sparse file are given as zeros without reading them (reading a
    hole costs as much as reading data: a file of a terabyte of holes would
    keep its sandbox's sleep busy for an hour)."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd = fd
        self._left = size
        self._position = 0
        self._hole_end = 0
        """Up to here from ``_position``, the file was a hole when last asked."""
        self._sparse = True
        """False once the filesystem cannot say where the holes are."""

    def read(self, size: int = -1) -> bytes:
        size = self._left if size < 0 else min(size, self._left)
        parts: list[bytes] = []
        want = size
        while want:
            piece = self._piece(want)
            if not piece:  # shrunk since the header was written
                parts.append(bytes(want))
                break
            parts.append(piece)
            self._position += len(piece)
            want -= len(piece)
        self._left -= size
        return b"".join(parts)

    def _piece(self, want: int) -> bytes:
        """Up to ``want`` bytes from ``_position``: zeros for a hole, else read."""
        if self._position >= self._hole_end and self._sparse:
            self._find_hole()
        if self._position < self._hole_end:
            return bytes(min(want, self._hole_end - self._position))
        return os.pread(self._fd, want, self._position)

    def _find_hole(self) -> None:
        try:
            data = os.lseek(self._fd, self._position, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data from here to the end: a hole
                self._hole_end = self._position + self._left
            else:  # EINVAL: the filesystem does not know holes
                self._sparse = False
            return
        self._hole_end = data


def extract_archive(source: Readable, root: Path, owner: tuple[int, int] | None) -> None:
    """Extracts the tar.zst from ``source`` into the existing empty directory
    ``root``, chowning every entry and ``root`` itself to ``owner`` (uid, gid)
    when given. Modes lose setuid, setgid and sticky bits. Raises
    ``ArchiveError`` for anything a snapshot would not contain, ``OSError``
    for local failures (a full disk). On error, ``root`` holds a partial tree."""
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        # read() calls are bounded, so a small archive of a huge file cannot
        # decompress into memory all at once.
        reader = zstandard.ZstdDecompressor().stream_reader(cast(IO[bytes], source))
        _Extractor(root_fd, owner, TarStream(reader)).run()
    except (zstandard.ZstdError, TarFormatError) as exc:
        raise ArchiveError(f"not a tar.zst snapshot: {exc}") from None
    finally:
        os.close(root_fd)


class _Extractor:
    """Creates each member relative to its parent directory's descriptor, opened
    component by component from the root with ``O_NOFOLLOW``. Directory modes
    and mtimes are set last, deepest first, so a read-only directory is filled
    before it is closed and its mtime is not disturbed by its children."""

    def __init__(self, root_fd: int, owner: tuple[int, int] | None, tar: TarStream) -> None:
        self._root_fd = root_fd
        self._owner = owner
        self._tar = tar
        self._dirs: list[tuple[tuple[str, ...], Member]] = []
        self._files: set[tuple[str, ...]] = set()
        """The regular files made so far: what a hard link may name."""
        self._parent: tuple[tuple[str, ...], int] | None = None

    def run(self) -> None:
        try:
            for member in self._tar.members():
                try:
                    self._extract(member)
                except OSError as exc:
                    if exc.errno not in _UNSAFE_ERRNOS:
                        raise
                    raise ArchiveError(f"{member.name!r}: {os.strerror(exc.errno)}") from None
                except (ValueError, OverflowError) as exc:  # NUL in a link, absurd mtime
                    raise ArchiveError(f"{member.name!r}: {exc}") from None
        finally:
            self._drop_parent()
        if not any(not parts for parts, _ in self._dirs):
            root = Member(ROOT, DIRECTORY, 0o755, 0, os.stat(self._root_fd).st_mtime_ns)
            self._dirs.insert(0, ((), root))
        for parts, member in reversed(self._dirs):
            fd = self._open_dir(parts)
            try:
                self._set_attributes(fd, member)
            finally:
                os.close(fd)

    def _extract(self, member: Member) -> None:
        parts = _parts(member.name)
        if not parts:
            if not member.is_dir:
                raise ArchiveError(f"{member.name!r}: the root is not a directory")
            self._dirs.append((parts, member))
            return
        parent, leaf = self._parent_fd(parts[:-1]), parts[-1]
        if member.is_file:
            fd = os.open(leaf, _CREATE_FLAGS, 0o600, dir_fd=parent)
            try:
                self._copy(member, fd)
                self._set_attributes(fd, member)
            finally:
                os.close(fd)
            self._files.add(parts)
        elif member.type == HARD_LINK:
            self._link(member, parent, leaf)
        elif member.is_dir:
            os.mkdir(leaf, 0o700, dir_fd=parent)
            self._dirs.append((parts, member))
        elif member.is_symlink:
            os.symlink(member.linkname, leaf, dir_fd=parent)
            if self._owner is not None:
                os.chown(leaf, *self._owner, dir_fd=parent, follow_symlinks=False)
            os.utime(leaf, ns=_times(member), dir_fd=parent, follow_symlinks=False)
        else:
            kind = _KINDS.get(member.type, f"of type {member.type!r}")
            raise ArchiveError(f"{member.name!r}: is {kind}, which a snapshot never holds")

    def _link(self, member: Member, parent: int, leaf: str) -> None:
        """Another name for a regular file this archive made before (nothing
        else: not a symlink, a directory or anything outside the tree)."""
        target = _parts(member.linkname)
        if target not in self._files:
            raise ArchiveError(
                f"{member.name!r}: a hard link to {member.linkname!r}, no file of it"
            )
        source = self._open_dir(target[:-1])
        try:
            os.link(target[-1], leaf, src_dir_fd=source, dst_dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(source)

    def _copy(self, member: Member, fd: int) -> None:
        """The member's bytes, read straight from the decompressed stream. Blocks
        of zeros are left as holes: the snapshot of a sparse file holds its holes
        as zeros, and writing them would take the disk space the file never had
        (a terabyte of holes would fill the host's disk)."""
        left = member.size
        while left:
            chunk = self._tar.read(min(left, CHUNK_BYTES))
            if not chunk:
                raise ArchiveError(f"{member.name!r}: the archive ends inside it")
            left -= len(chunk)
            for start in range(0, len(chunk), SPARSE_BLOCK):
                block = chunk[start : start + SPARSE_BLOCK]
                if block == _ZEROS[: len(block)]:
                    os.lseek(fd, len(block), os.SEEK_CUR)
                    continue
                view = memoryview(block)
                while view:
                    view = view[os.write(fd, view) :]
        # A hole at the end is no data written: the size says where it ends.
        os.ftruncate(fd, member.size)

    def _set_attributes(self, fd: int, member: Member) -> None:
        # chown before chmod: chown clears mode bits.
        if self._owner is not None:
            os.fchown(fd, *self._owner)
        os.fchmod(fd, member.mode & 0o777)
        os.utime(fd, ns=_times(member))

    def _parent_fd(self, parts: tuple[str, ...]) -> int:
        """The open parent directory; kept while members share it (most do)."""
        if self._parent is not None and self._parent[0] == parts:
            return self._parent[1]
        self._drop_parent()
        fd = self._open_dir(parts)
        self._parent = (parts, fd)
        return fd

    def _drop_parent(self) -> None:
        if self._parent is not None:
            os.close(self._parent[1])
            self._parent = None

    def _open_dir(self, parts: tuple[str, ...]) -> int:
        fd = os.dup(self._root_fd)
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)
            fd = child
        return fd


def _parts(name: str) -> tuple[str, ...]:
    if name == ROOT:
        return ()
    parts = tuple(name.split("/"))
    if name.startswith("/") or "\x00" in name or any(p in ("", ".", "..") for p in parts):
        raise ArchiveError(f"{name!r}: not a plain relative path")
    return parts


def _times(member: Member) -> tuple[int, int]:
    """(atime, mtime) in nanoseconds, for ``os.utime``."""
    return member.mtime_ns, member.mtime_ns
