"""Confinement of paths to a workspace directory on this machine's file system.

``WorkspacePaths.resolve`` turns a caller's path into the canonical host path to
operate on: ``.``/``..`` collapsed, every symlink followed (a dangling one too),
the result checked to lie inside the workspace. The returned path contains no
symlinks, so the operation cannot follow one out afterwards unless the tree
changes in between: ``open_beneath`` opens it so that such a change fails the
open, and ``actas.py`` limits what any other use of the path can reach.
Blocking: call from a worker thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import stat
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

from stead.sandbox.base import WORKSPACE
from stead.sandbox.errors import (
    FileError,
    FileNotFound,
    InvalidArgument,
    PathOutsideWorkspace,
)

MAX_SYMLINK_HOPS = 40


@dataclass(frozen=True, slots=True)
class WorkspacePaths:
    root: Path
    """The workspace directory on the host, canonical (no symlinks)."""
    shown_as: str
    """The workspace root as the sandbox's processes see it."""
    alias: str = WORKSPACE
    """Another absolute name of the root that callers may use."""
    uid: int | None = None
    """The host uid whose rights file operations use (``actas.py``): the
    sandbox's, so a tree changed after ``resolve`` leads nowhere its own user
    could not go. None: the caller's own rights."""

    @classmethod
    def open(
        cls, root: Path, shown_as: str | None = None, *, uid: int | None = None
    ) -> WorkspacePaths:
        real = Path(os.path.realpath(root))
        return cls(real, shown_as if shown_as is not None else str(real), uid=uid)

    def resolve(self, path: str) -> Path:
        """The canonical host path for ``path``; raises ``PathOutsideWorkspace``,
        ``InvalidArgument`` or a ``FileError`` (a component is not a directory,
        a symlink loop, permission denied)."""
        if "\x00" in path:
            raise InvalidArgument(f"path {path!r} contains a NUL byte")
        if not path:
            raise InvalidArgument("path is empty")
        candidate = self._host_path(path)
        try:
            full = canonical(candidate)
        except OSError as exc:
            raise file_error(path, exc) from None
        if not within(full, self.root):
            raise PathOutsideWorkspace(path)
        return full

    def show(self, host_path: Path) -> str:
        """``host_path`` (inside the root) as the sandbox's processes name it."""
        relative = host_path.relative_to(self.root)
        return self.shown_as if relative == Path() else f"{self.shown_as.rstrip('/')}/{relative}"

    def _host_path(self, path: str) -> Path:
        pure = PurePosixPath(os.path.normpath(path))
        if not pure.is_absolute():
            return self.root / pure
        for name in (self.alias, self.shown_as):
            base = PurePosixPath(name)
            if pure.parts[: len(base.parts)] == base.parts:
                return self.root.joinpath(*pure.parts[len(base.parts) :])
        return Path(pure)


def within(path: Path, root: Path) -> bool:
    return path.parts[: len(root.parts)] == root.parts


def canonical(path: Path) -> Path:
    """``path`` (absolute) with every symlink followed, component by component.

    Components that do not exist are kept as spelled (``..`` after one cancels
    it), so a file about to be created under new directories still resolves.
    Raises ``OSError`` (ENOTDIR, ELOOP, EACCES, ...) instead of returning a
    partly resolved path.
    """
    pending = list(reversed(path.parts[1:]))
    current = Path(path.anchor or "/")
    missing: list[str] = []
    hops = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        if name == "..":
            if missing:
                missing.pop()
            else:
                current = current.parent
            continue
        if missing:
            missing.append(name)
            continue
        candidate = current / name
        try:
            mode = os.lstat(candidate).st_mode
        except FileNotFoundError:
            missing.append(name)
            continue
        if not stat.S_ISLNK(mode):
            current = candidate
            continue
        hops += 1
        if hops > MAX_SYMLINK_HOPS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        target = PurePosixPath(os.readlink(candidate))
        if target.is_absolute():
            current = Path("/")
        pending.extend(reversed([p for p in target.parts if p != "/"]))
    return current.joinpath(*missing)


def open_beneath(root: Path, target: Path, flags: int, mode: int = 0) -> int:
    """Opens ``target``, a path ``resolve`` returned, only if it still leads
    there: relative to ``root`` with no symlink and no ``..`` on the way
    (``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``), so a
    directory swapped for a symlink since the check fails the open (ELOOP)
    instead of leading elsewhere. Falls back to a plain ``open`` on kernels
    before 5.6, where the caller's acting uid (``actas.py``) is the guard."""
    if not within(target, root):
        raise OSError(errno.EXDEV, "outside the workspace")
    relative = str(target.relative_to(root)) if target != root else "."
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _openat2(root_fd, relative, flags | os.O_CLOEXEC, mode)
    except _NoOpenat2:
        return os.open(target, flags | os.O_CLOEXEC, mode)
    finally:
        os.close(root_fd)


def make_parents_beneath(root: Path, target: Path) -> None:
    """Creates ``target``'s missing parent directories below ``root``, each
    looked up relative to the one before with ``open_beneath``'s rules: a
    component swapped for a symlink fails (ELOOP) instead of being followed."""
    if not within(target, root):
        raise OSError(errno.EXDEV, "outside the workspace")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in target.parent.relative_to(root).parts:
            try:
                child = _open_below(fd, name)
            except FileNotFoundError:
                with contextlib.suppress(FileExistsError):  # made meanwhile: fine
                    os.mkdir(name, 0o777, dir_fd=fd)
                child = _open_below(fd, name)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)


def _open_below(dir_fd: int, name: str) -> int:
    flags = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        return _openat2(dir_fd, name, flags, 0)
    except _NoOpenat2:
        return os.open(name, flags | os.O_NOFOLLOW, dir_fd=dir_fd)


class _NoOpenat2(Exception):
    pass


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


_SYS_OPENAT2 = 437  # the same number on every architecture (added after the table merge)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


@cache
def _syscall() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    function = libc.syscall
    function.restype = ctypes.c_long
    return function


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    how = _OpenHow(
        flags, mode if flags & os.O_CREAT else 0,
        _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
    )  # fmt: skip
    for _ in range(3):  # EAGAIN: a rename elsewhere raced the lookup; try again
        fd = _syscall()(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dir_fd),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        code = ctypes.get_errno()
        if code != errno.EAGAIN:
            break
    if code in (errno.ENOSYS, errno.EPERM) and not _openat2_works():
        raise _NoOpenat2
    raise OSError(code, os.strerror(code))


@cache
def _openat2_works() -> bool:
    """Whether this kernel (and any seccomp filter around us) has openat2."""
    how = _OpenHow(os.O_RDONLY | os.O_CLOEXEC, 0, 0)
    fd = _syscall()(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_int(-100),  # AT_FDCWD
        ctypes.c_char_p(b"/"),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd >= 0:
        os.close(fd)
        return True
    return False


def file_error(path: str, exc: OSError) -> FileError:
    """An ``OSError`` as a ``FileError`` that names ``path`` as the caller spelled it."""
    if isinstance(exc, FileNotFoundError):
        return FileNotFound(path)
    return FileError(path, os_reason(exc))


def os_reason(exc: OSError) -> str:
    reasons = {
        errno.ENOTDIR: "not a directory",
        errno.EISDIR: "is a directory",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EEXIST: "file already exists",
        errno.ELOOP: "too many levels of symbolic links",
        errno.ENOSPC: "no space left on device",
        errno.ENAMETOOLONG: "file name too long",
    }
    return reasons.get(exc.errno or 0) or (exc.strerror or "i/o error").lower()
