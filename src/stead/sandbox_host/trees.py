"""Removing a tree a sandbox wrote (its ``/tmp``, its workspace, a writable
mount, a restore's staging) as root: however deep, never through a symlink.

``shutil.rmtree`` recurses once per level, so a directory a few thousand
levels deep (one shell loop of ``mkdir d && cd d``) raised ``RecursionError``,
which ``ignore_errors`` does not catch: a sandbox that made one in its ``/tmp``
could neither sleep, wake nor be destroyed. Here a directory that is not empty
has its entries renamed up into the tree's top instead, so the walk holds two
descriptors and no stack, and renames each entry at most once.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TAKEN = frozenset({errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR, errno.EINVAL})
"""What a rename onto a name already in use (or onto its own parent) fails with."""
_NAMES = 1000
"""Names a rename up tries before it gives up (each taken by the sandbox's own)."""


def remove_tree(
    path: Path | str, *, dir_fd: int | None = None, ignore_errors: bool = False
) -> None:
    """Removes ``path`` (relative to ``dir_fd`` if given) and everything below
    it; a symlink or file there is removed itself, nothing there is no error.
    With ``ignore_errors``, what cannot be removed is left and the rest goes."""
    try:
        top = os.open(path, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            if ignore_errors:
                return
            raise
        _ignoring(ignore_errors, os.unlink, path, dir_fd)
        return
    try:
        _empty(top, ignore_errors)
    finally:
        os.close(top)
    _ignoring(ignore_errors, os.rmdir, path, dir_fd)


def _empty(top: int, ignore_errors: bool) -> None:
    names = (f".stead-removing-{n}" for n in itertools.count())
    left: set[str] = set()
    while True:
        with os.scandir(top) as entries:
            found = [entry.name for entry in entries if entry.name not in left]
        if not found:
            return
        for name in found:
            try:
                _remove_or_lift(top, name, names)
            except FileNotFoundError:
                continue  # gone meanwhile
            except OSError:
                if not ignore_errors:
                    raise
                left.add(name)


def _remove_or_lift(top: int, name: str, names: Iterator[str]) -> None:
    """Removes ``name`` if it is not a directory or is empty; else moves its
    entries up into ``top``, for a later pass of ``_empty``."""
    try:
        os.unlink(name, dir_fd=top)
        return
    except IsADirectoryError:
        pass
    try:
        os.rmdir(name, dir_fd=top)
        return
    except OSError as exc:
        if exc.errno != errno.ENOTEMPTY:
            raise
    child = os.open(name, _DIR_FLAGS, dir_fd=top)
    try:
        with os.scandir(child) as entries:
            inner = [entry.name for entry in entries]
        for entry in inner:
            _lift(child, entry, top, names)
    finally:
        os.close(child)


def _lift(child: int, entry: str, top: int, names: Iterator[str]) -> None:
    for _ in range(_NAMES):
        try:
            os.rename(entry, next(names), src_dir_fd=child, dst_dir_fd=top)
            return
        except OSError as exc:
            if exc.errno not in _TAKEN:
                raise
    raise OSError(errno.EEXIST, "no free name to move an entry up to", entry)


def _ignoring(
    ignore_errors: bool, remove: Callable[..., None], path: Path | str, dir_fd: int | None
) -> None:
    try:
        remove(path, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError:
        if not ignore_errors:
            raise
