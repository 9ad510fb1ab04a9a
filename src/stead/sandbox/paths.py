"""Confinement of paths to a workspace directory on this machine's file system.

``WorkspacePaths.resolve`` turns a caller's path into the canonical host path to
operate on: ``.``/``..`` collapsed, every symlink followed (a dangling one too),
the result checked to lie inside the workspace. The returned path contains no
symlinks, so the operation cannot follow one out afterwards unless the tree
changes in between; callers open the leaf with ``O_NOFOLLOW`` to narrow that.
Blocking: call from a worker thread.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

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
