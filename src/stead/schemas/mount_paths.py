"""Where a session resource may be put in the sandbox: the rule every kind's
``mount_path`` keeps (a plain absolute path below the kind's own directory)."""

from __future__ import annotations

import posixpath

from stead.schemas.validation import RequestError

MAX_MOUNT_PATH = 1024


def plain_path_under(path: str, root: str, field: str) -> str:
    """``path``, when it is a plain absolute path below ``root``: no '.', '..' or
    '//', no NUL or backslash, at most ``MAX_MOUNT_PATH`` characters."""
    if len(path) > MAX_MOUNT_PATH or "\0" in path or "\\" in path:
        raise RequestError(f"{field}: not a usable path")
    if posixpath.normpath(path) != path or not path.startswith(root + "/"):
        raise RequestError(
            f"{field}: {path[:200]!r} must be a plain absolute path under {root}/ "
            "(no '.', '..' or '//')"
        )
    return path
