"""Acting on a sandbox's files with the sandbox user's rights, not root's.

The sandbox host runs as root and reads, writes and searches workspaces on the
host's file system. Paths are confined to the workspace (``paths.py``), but the
sandbox's own processes can change the tree between that check and the use:
swap a directory for a symlink to ``/etc`` and root would follow it. So every
such operation runs as the sandbox's uid: a thread switches its file-system
uid and gid (``setfsuid``/``setfsgid`` change the calling thread only, and
drop root's file capabilities while they are not 0), and a helper process is
started through ``setpriv``. A race won then reaches only what the sandbox's
own user could reach on the host, never root's files; reads and writes are
opened with ``paths.open_beneath``, which refuses the detour outright.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache


class ActAsError(OSError):
    """The thread could not take on the sandbox user's identity."""


@cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _set(call: str, value: int) -> int:
    """``setfsuid``/``setfsgid``: returns the previous id (they report no error)."""
    function = getattr(_libc(), call)
    function.argtypes = [ctypes.c_uint]
    function.restype = ctypes.c_int
    return int(function(value))


def _current(call: str) -> int:
    # An invalid id (-1) changes nothing and returns the current one.
    return _set(call, 0xFFFFFFFF)


@contextmanager
def acting_as(uid: int | None) -> Iterator[None]:
    """File-system calls of this thread inside the block act as ``uid`` (its gid
    equal), with no root file capabilities; ``None`` changes nothing. Blocking
    code only: an ``await`` inside would let other tasks run as ``uid`` too."""
    if uid is None or os.geteuid() != 0:
        yield
        return
    previous_gid = _set("setfsgid", uid)
    previous_uid = _set("setfsuid", uid)
    try:
        if _current("setfsuid") != uid or _current("setfsgid") != uid:
            raise ActAsError(f"cannot act as uid {uid} on files")
        yield
    finally:
        _set("setfsuid", previous_uid)
        _set("setfsgid", previous_gid)


def argv_as(uid: int | None, argv: list[str]) -> list[str]:
    """``argv`` run as ``uid`` (its gid equal, no supplementary groups);
    unchanged when ``uid`` is None or this process is not root."""
    if uid is None or os.geteuid() != 0:
        return argv
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *argv]
