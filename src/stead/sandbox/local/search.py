"""glob and grep on a host workspace: validate, run ``walker.py`` as a child, parse.

The child gets the search's time budget; this side kills its group
``KILL_GRACE`` seconds later if it has not finished (a regex stuck in one line)
and keeps the results streamed until then. Cancellation kills it at once.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
from anyio import to_thread
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from stead.sandbox.base import (
    GLOB_RESULT_LIMIT,
    GREP_LINE_SCAN_LIMIT,
    GREP_MAX_LINE_LENGTH,
    GREP_OUTPUT_LIMIT,
    SEARCH_SECONDS,
    WALK_ENTRY_LIMIT,
    GlobResult,
    GrepResult,
)
from stead.sandbox.errors import (
    FileError,
    FileNotFound,
    InvalidArgument,
    SandboxError,
    SandboxUnavailable,
)
from stead.sandbox.local.actas import acting_as, argv_as
from stead.sandbox.local.paths import WorkspacePaths
from stead.sandbox.local.processes import group

WALKER = Path(__file__).with_name("walker.py")
KILL_GRACE = 2.0
MAX_RECORD = 1024 * 1024
_ENV = {"LANG": "C.UTF-8", "PATH": "/usr/bin:/bin"}


async def glob(paths: WorkspacePaths, pattern: str, path: str | None) -> GlobResult:
    if not pattern:
        raise InvalidArgument("the pattern is empty")
    if "\x00" in pattern:
        raise InvalidArgument("the pattern contains a NUL byte")
    if PurePosixPath(pattern).is_absolute():
        raise InvalidArgument(
            "absolute pattern not permitted; pass a relative pattern (and optionally path)"
        )
    if ".." in PurePosixPath(pattern).parts:
        raise InvalidArgument("'..' is not permitted in the pattern")
    root = await _search_root(paths, path, directory=True)
    results, status = await _run(paths, root, {"op": "glob", "pattern": pattern})
    return GlobResult(
        tuple(results),
        total=max(int(status.get("total", len(results))), len(results)),
        walk_limit_hit=bool(status.get("walk_limit_hit")),
        timed_out=bool(status.get("timed_out")),
    )


async def grep(paths: WorkspacePaths, pattern: str, path: str | None) -> GrepResult:
    if "\x00" in pattern:
        raise InvalidArgument("the pattern contains a NUL byte")
    root = await _search_root(paths, path, directory=False)
    results, status = await _run(paths, root, {"op": "grep", "pattern": pattern})
    return GrepResult(
        tuple(results),
        truncated=bool(status.get("truncated")),
        walk_limit_hit=bool(status.get("walk_limit_hit")),
        timed_out=bool(status.get("timed_out")),
    )


async def _search_root(paths: WorkspacePaths, path: str | None, *, directory: bool) -> Path:
    spelled = path or "."

    def check() -> Path:
        with acting_as(paths.uid):
            root = paths.resolve(spelled)
            if not root.exists():
                raise FileNotFound(spelled)
            if directory and not root.is_dir():
                raise FileError(spelled, "not a directory")
            return root

    return await to_thread.run_sync(check)


async def _run(
    paths: WorkspacePaths, root: Path, request: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    request |= {
        "root": str(root),
        "workspace": str(paths.root),
        "shown_as": paths.shown_as,
        "seconds": SEARCH_SECONDS,
        "walk_limit": WALK_ENTRY_LIMIT,
        "result_limit": GLOB_RESULT_LIMIT,
        "output_limit": GREP_OUTPUT_LIMIT,
        "line_length": GREP_MAX_LINE_LENGTH,
        "line_scan": GREP_LINE_SCAN_LIMIT,
    }
    results: list[str] = []
    status: dict[str, Any] = {"timed_out": True}
    # The walker opens what it finds by path: with the workspace user's rights,
    # a tree changed under it reaches nothing that user could not.
    argv = argv_as(paths.uid, [sys.executable, "-I", "-S", str(WALKER)])
    try:
        async with group(argv, cwd=paths.root, env=_ENV) as process:
            with anyio.move_on_after(SEARCH_SECONDS + KILL_GRACE):
                status = await _collect(process, request, results)
    except OSError as exc:  # the interpreter could not be started
        raise SandboxUnavailable(f"cannot start the search: {exc.strerror or exc}") from None
    if "invalid" in status:
        raise InvalidArgument(str(status["invalid"]))
    if "error" in status:
        raise SandboxError(str(status["error"]))
    return results, status


async def _collect(process: Process, request: dict[str, Any], results: list[str]) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    # A child that died at once shows up as EOF below.
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.send(json.dumps(request).encode())
        await process.stdin.aclose()
    stream = BufferedByteReceiveStream(process.stdout)
    budget = GREP_OUTPUT_LIMIT + MAX_RECORD
    while True:
        try:
            line = await stream.receive_until(b"\n", MAX_RECORD)
        except (anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound):
            return {"error": f"{request['op']} stopped unexpectedly"}
        value = json.loads(line)
        if isinstance(value, dict):
            return value
        budget -= len(line)
        if budget < 0:  # the child ignored its own limit
            return {"truncated": True}
        results.append(str(value))
