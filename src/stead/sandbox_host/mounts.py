"""A sandbox's mount tree: API content put at paths under ``/mnt`` inside it.

The tree is a directory on the sandbox's disk beside the workspace
(``disk.py``, so what the sandbox writes to it counts against the disk's
size), bound at ``/mnt`` in the body (``bwrap.py``). The host puts files there
as root and reads what the sandbox wrote, always through descriptors opened
relative to their parent's with ``O_NOFOLLOW``: a symlink or a rename the
sandbox makes inside a writable mount can point the host at nothing outside
the mount.

Read-only content is owned by root (files 0444, or 0555 when put executable,
directories 0755), so the sandbox user can read it and neither change nor
remove it; writable mounts are owned by the sandbox user. Directories above a
mount stay root's.

Mount content is not part of the workspace snapshot. It stays on the disk
while the sandbox sleeps, and the brain puts it again (only what differs)
before the sandbox serves a turn: its source of truth is the API (files,
skills, memory stores), which can change while the sandbox sleeps, and a
snapshot would bring back content since removed. What the sandbox writes to a
writable mount is read back by the brain after each turn (outputs, memories).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from stead.mount_paths import LISTED_ENTRIES, MAX_DEPTH, NAME_MAX, part_name, put_name
from stead.sandbox import FileNotFound, FileTooLarge, InvalidArgument, NotARegularFile, ops
from stead.sandbox_host.trees import remove_tree

MOUNT_ROOT = "/mnt"
"""Where the tree appears inside the sandbox."""
SKILLS = "skills"
"""The agent's skills: ``/mnt/skills``, bound read-only at ``/workspace/skills`` too."""
CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def mount_parts(mount: str) -> list[str]:
    """The components of ``mount`` below ``/mnt``; ``InvalidArgument`` unless it
    is a plain absolute path strictly inside it."""
    prefix = MOUNT_ROOT + "/"
    if not mount.startswith(prefix):
        raise InvalidArgument(f"mount: {mount!r} is not under {prefix}")
    return relative_parts(mount[len(prefix) :], field="mount")


def relative_parts(path: str, *, field: str = "path") -> list[str]:
    """The components of a relative path; ``InvalidArgument`` for an empty,
    absolute or dotted one (``.`` or ``..`` segments), or one with a NUL."""
    parts = path.split("/")
    if "\0" in path or any(part in ("", ".", "..") for part in parts):
        raise InvalidArgument(f"{field}: {path!r} must be a plain path without '.', '..' or '//'")
    if len(parts) > MAX_DEPTH:
        raise InvalidArgument(f"{field}: {path!r} is deeper than {MAX_DEPTH} levels")
    return parts


class MountTree:
    """One sandbox's ``/mnt``. Blocking: the host calls it in a worker thread."""

    def __init__(self, directory: Path, uid: int) -> None:
        self.directory = directory
        self._uid = uid

    def ensure(self) -> None:
        """Makes the tree's root and its ``skills`` directory (root's, 0755) if
        they are missing. The tree is on the sandbox's disk, which the caller
        holds mounted (``disk.py``)."""
        for directory in (self.directory, self.skills_directory):
            directory.mkdir(mode=0o755, exist_ok=True)
            os.chown(directory, 0, 0)
            os.chmod(directory, 0o755)

    @property
    def skills_directory(self) -> Path:
        """``/mnt/skills``, which the sandbox also sees at ``/workspace/skills``."""
        return self.directory / SKILLS

    def put(self, mount: str, files: Sequence[ops.MountFile], *, writable: bool) -> None:
        parts = mount_parts(mount)
        checked = [(relative_parts(f.path), f) for f in files]
        self.ensure()
        owner = self._uid if writable else 0
        with self._directory(parts, create=True) as mount_fd:
            os.fchown(mount_fd, owner, owner)
            for path, file in checked:
                with _walk(mount_fd, path[:-1], create=True, owner=owner) as parent:
                    _write(parent, path[-1], file.data, owner=owner, mode=_mode(writable, file))

    def put_part(self, request: ops.PutMountPart) -> None:
        """One part of a file put in parts (``ops.PutMountPart``)."""
        parts, relative = mount_parts(request.mount), relative_parts(request.path)
        self.ensure()
        owner = self._uid if request.writable else 0
        with self._directory(parts, create=True) as mount_fd:
            os.fchown(mount_fd, owner, owner)
            with _walk(mount_fd, relative[:-1], create=True, owner=owner) as parent:
                _write_part(parent, relative[-1], request, owner=owner)

    def read_part(self, mount: str, path: str, offset: int, length: int) -> ops.MountPart:
        with self._open_regular(mount, path) as handle:
            size = os.fstat(handle.fileno()).st_size
            data = _pread(handle.fileno(), length, offset)
        return ops.MountPart(data=data, size=size)

    def listing(self, mount: str) -> ops.MountListing:
        parts = mount_parts(mount)
        found: list[ops.MountedFile] = []
        try:
            with self._directory(parts) as mount_fd:
                truncated = _list(mount_fd, [], found, budget=[LISTED_ENTRIES])
        except FileNotFoundError:
            return ops.MountListing(files=[])
        found.sort(key=lambda f: f.path)
        return ops.MountListing(files=found, truncated=truncated)

    def read(self, mount: str, path: str, max_bytes: int) -> bytes:
        with self._open_regular(mount, path) as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise FileTooLarge(f"{mount}/{path}", size, max_bytes)
        return data

    @contextlib.contextmanager
    def _open_regular(self, mount: str, path: str) -> Iterator[BinaryIO]:
        """The regular file ``path`` under ``mount``, opened without following a
        link: ``FileNotFound``, ``NotARegularFile``."""
        parts, relative = mount_parts(mount), relative_parts(path)
        try:
            with self._directory(parts + relative[:-1]) as parent:
                fd = os.open(relative[-1], _READ_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise FileNotFound(f"{mount}/{path}") from None
        except OSError:  # a link (ELOOP) or a file on the way (ENOTDIR)
            raise NotARegularFile(f"{mount}/{path}") from None
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise NotARegularFile(f"{mount}/{path}")
            yield handle

    def remove(self, mount: str, paths: Sequence[str] | None) -> None:
        parts = mount_parts(mount)
        targets = [parts] if paths is None else [parts + relative_parts(p) for p in paths]
        for target in targets:
            try:
                with self._directory(target[:-1]) as parent:
                    _remove(parent, target[-1])
            except FileNotFoundError:
                continue
            except OSError:
                raise InvalidArgument(f"path: {'/'.join(target)!r} crosses a link") from None

    @contextlib.contextmanager
    def _directory(self, parts: list[str], *, create: bool = False) -> Iterator[int]:
        """The directory ``parts`` below the tree's root; made root's if missing
        and ``create`` (the caller sets the mount's own owner)."""
        root = os.open(self.directory, _DIR_FLAGS)
        try:
            with _walk(root, parts, create=create) as fd:
                yield fd
        finally:
            os.close(root)


@contextlib.contextmanager
def _walk(start: int, parts: list[str], *, create: bool = False, owner: int = 0) -> Iterator[int]:
    """An fd of the directory ``parts`` below ``start``, never following a link;
    missing directories are made (owned by ``owner``) when ``create``."""
    fd = os.dup(start)
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o755, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.fchown(child, owner, owner)
                os.fchmod(child, 0o755)
            except OSError as exc:
                if exc.errno == errno.ENAMETOOLONG:
                    raise _too_long(part) from None
                raise InvalidArgument(
                    f"path: {part!r} is a link or a file, not a directory"
                ) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _mode(writable: bool, file: ops.MountFile | ops.PutMountPart) -> int:
    """Read-only content is never writable, whatever else it is."""
    return (0o644 if writable else 0o444) | (0o111 if file.executable else 0)


def _write(parent: int, name: str, data: bytes, *, owner: int, mode: int) -> None:
    # Written aside and renamed over: a reader never sees half a file, and a
    # link the sandbox left at ``name`` is replaced, never written through.
    temporary = put_name()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600, dir_fd=parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            os.fchown(handle.fileno(), owner, owner)
            os.fchmod(handle.fileno(), mode)
        _rename_over(parent, temporary, name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=parent)
        raise


def _rename_over(parent: int, temporary: str, name: str) -> None:
    """Puts the file ``temporary`` at ``name``, in place of a file or an empty
    directory there (what a file removed from below it left: the content moved
    from ``name/...`` to ``name``); ``InvalidArgument`` for a directory that
    holds anything, or a name too long for the file system."""
    try:
        os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
    except IsADirectoryError:
        try:
            _remove_empty_tree(parent, name)
        except OSError:
            raise InvalidArgument(f"path: {name!r} is a directory") from None
        os.rename(temporary, name, src_dir_fd=parent, dst_dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise _too_long(name) from None
        raise


def _remove_empty_tree(parent: int, name: str, depth: int = 0) -> None:
    """Removes the directory ``name`` if it holds nothing but empty directories
    (what removing the files below it left); ``OSError`` (ENOTEMPTY) if it
    holds a file, a link or anything else, which stays."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        with os.scandir(fd) as entries:
            names = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        if depth < MAX_DEPTH:
            for child in names:
                _remove_empty_tree(fd, child, depth + 1)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


def _too_long(name: str) -> InvalidArgument:
    return InvalidArgument(f"path: {name[:80]!r}... is longer than {NAME_MAX} bytes")


def _write_part(parent: int, name: str, part: ops.PutMountPart, *, owner: int) -> None:
    aside = part_name(name)
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if part.offset == 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(aside, dir_fd=parent)
            fd = os.open(aside, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=parent)
        else:
            fd = os.open(aside, flags, dir_fd=parent)
    except FileNotFoundError:
        raise InvalidArgument(f"offset: no part of {name!r} is begun; send offset 0") from None
    except OSError:  # a directory or link in the way (the sandbox's, in a writable mount)
        raise InvalidArgument(f"path: {name!r} cannot be written in parts here") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != part.offset:
            raise InvalidArgument(
                f"offset: {part.offset}, but {info.st_size} bytes of {name!r} are written;"
                " send offset 0"
            )
        _pwrite(fd, part.data, part.offset)
        if part.last:
            os.fchown(fd, owner, owner)
            os.fchmod(fd, _mode(part.writable, part))
    finally:
        os.close(fd)
    if part.last:
        try:
            _rename_over(parent, aside, name)
        except InvalidArgument:
            os.unlink(aside, dir_fd=parent)
            raise


def _pwrite(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _pread(fd: int, length: int, offset: int) -> bytes:
    chunks = []
    while length > 0 and (chunk := os.pread(fd, length, offset)):
        chunks.append(chunk)
        length, offset = length - len(chunk), offset + len(chunk)
    return b"".join(chunks)


def _list(fd: int, prefix: list[str], found: list[ops.MountedFile], *, budget: list[int]) -> bool:
    """Adds the regular files below ``fd`` to ``found``; True if it stopped early."""
    with os.scandir(fd) as entries:
        for entry in entries:
            budget[0] -= 1
            if budget[0] < 0:
                return True
            if not _utf8(entry.name):
                # No stead file has such a name (the brain's paths are text),
                # and none could be read or stored by it: left out, with what
                # a directory of such a name holds.
                continue
            path = [*prefix, entry.name]
            if entry.is_dir(follow_symlinks=False) and len(path) < MAX_DEPTH:
                with contextlib.suppress(OSError), _walk(fd, [entry.name]) as child:
                    if _list(child, path, found, budget=budget):
                        return True
            elif entry.is_file(follow_symlinks=False):
                described = _describe(fd, entry.name, "/".join(path))
                if described is not None:
                    found.append(described)
    return False


def _utf8(name: str) -> bool:
    """Whether a name as the OS gave it (undecodable bytes as surrogates) is UTF-8."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


def _describe(parent: int, name: str, path: str) -> ops.MountedFile | None:
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=parent)
    except OSError:  # replaced by a link or removed since the scan
        return None
    digest = hashlib.sha256()
    size = 0
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):
            return None
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    executable = bool(mode & 0o111)
    return ops.MountedFile(path=path, size=size, sha256=digest.hexdigest(), executable=executable)


def _remove(parent: int, name: str) -> None:
    info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        remove_tree(name, dir_fd=parent)
    else:
        os.unlink(name, dir_fd=parent)
