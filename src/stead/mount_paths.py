"""What a path in a sandbox's mounts may be.

Shared by the body, which puts files there (``sandbox_host/mounts.py``), the
brain, which reads back what the agent changed (``runtime/memory_diff.py``),
and the API, which refuses content that could never be put there (memory
paths, skill files): accepted and then failing at a session's first tool call,
such content would break every turn of every session that mounts it.

A mount is a directory tree on a Linux file system, so a name is at most
``NAME_MAX`` bytes, and the host walks at most ``MAX_DEPTH`` levels below a
mount. While the host writes a file it keeps it under a temporary name of its
own in the same directory (``put_name``, ``part_name``): such a name is never
content, so the API refuses it as a memory's and the brain ignores it.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable

NAME_MAX = 255
"""Bytes in one name (a path component), as the file system allows."""
MAX_DEPTH = 32
"""Components in a path below a mount."""
LISTED_ENTRIES = 10_000
"""Directory entries one listing of a mount visits before it stops: a listing
that stopped there is not whole (``MountListing.truncated``)."""
_TEMPORARY = re.compile(r"\.stead-(?:put-[0-9a-f]{16}|part-[0-9a-f]{24})\Z")


def put_name() -> str:
    """A new temporary name for a file the host writes whole, then renames."""
    return f".stead-put-{secrets.token_hex(8)}"


def part_name(name: str) -> str:
    """Where the parts of ``name`` gather until the last one: one name per
    target (a new first part replaces an unfinished one), within ``NAME_MAX``."""
    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()
    return f".stead-part-{digest[:24]}"


def is_temporary(name: str) -> bool:
    """Whether ``name`` is one the host gives a file while it writes it."""
    return _TEMPORARY.match(name) is not None


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a file's name in a mount; None if it can."""
    if len(name.encode("utf-8", "surrogatepass")) > NAME_MAX:
        return f"is longer than {NAME_MAX} bytes"
    if is_temporary(name):
        return "is a name the sandbox host keeps for files it is writing"
    return None


def directories_of(paths: Iterable[str]) -> set[str]:
    """The directories above each of ``paths`` (``a/b/c``: ``a`` and ``a/b``;
    ``/a/b``: ``/a``). One of ``paths`` among them is both a file and a
    directory, which a mount cannot hold."""
    return {path[:i] for path in paths for i, c in enumerate(path) if c == "/" and i > 0}
