"""The Sandbox interface and the records it returns.

A sandbox is one agent's body: a workspace directory (``/workspace`` as its own
processes see it) and a persistent bash shell. It offers primitives, not
model-facing text: ``tools/`` formats results for the model. Every method is
async and never blocks the event loop. If the awaiting task is cancelled, the
method kills whatever process it started (the whole process group) before it
re-raises the cancellation. Methods raise the ``SandboxError`` family of
``errors.py``.

Paths: a relative path resolves against the workspace root; an absolute path
must lie inside the workspace, named either as ``/workspace/...`` or as the
sandbox shows the workspace to its own processes (``workspace_path``). Every
symlink on the way is followed before the check, so a link that leads out is
refused with ``PathOutsideWorkspace``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

WORKSPACE = "/workspace"
"""The workspace as a sandbox's processes see it under an isolating backend."""

EXEC_OUTPUT_LIMIT = 100 * 1024
"""Bytes of a command's output kept, counted from the end."""
GREP_OUTPUT_LIMIT = 100 * 1024
"""Bytes of grep output (``path:line:text`` lines plus newlines) returned."""
GREP_MAX_LINE_LENGTH = 2000
"""Characters of a matching line shown; longer lines are cut."""
GREP_LINE_SCAN_LIMIT = 64 * 1024
"""Bytes of each line searched; the rest of a longer line is not searched."""
SEARCH_SECONDS = 30.0
"""Wall-clock budget of one glob or grep; results found until then are kept."""
GLOB_RESULT_LIMIT = 200
"""Paths one glob returns, newest first."""
WALK_ENTRY_LIMIT = 50_000
"""Directory entries one glob or grep visits before it stops."""
LIST_ENTRY_LIMIT = 1000
"""Entries one directory listing returns, by name; ``total`` counts them all."""


class ExecStatus(enum.StrEnum):
    """What a sandbox knows about an exec op key (DESIGN rule 5)."""

    STARTED = "started"
    """Recorded as started and not (yet) finished: running now, or in doubt."""
    FINISHED = "finished"
    """Finished; ``exec_result`` returns the recorded result."""
    UNKNOWN = "unknown"
    """Never started under this op key in this sandbox."""


@dataclass(frozen=True, slots=True)
class ExecResult:
    """The outcome of one command in the persistent shell."""

    output: str
    """stdout and stderr interleaved, decoded as UTF-8 (invalid bytes replaced);
    at most ``EXEC_OUTPUT_LIMIT`` bytes, the tail kept when it is longer."""
    exit_code: int | None
    """The command's exit status; None when it did not finish on its own
    (timed out or interrupted)."""
    truncated: bool = False
    """The output was longer than the limit and its beginning was dropped."""
    timed_out: bool = False
    """The command ran past its timeout; the shell was killed with it."""
    interrupted: bool = False
    """The caller was cancelled; the shell was killed with the command."""
    shell_exited: bool = False
    """The command ended the shell itself (``exit``, ``exec``, a fatal signal)."""

    @property
    def shell_reset(self) -> bool:
        """The next exec starts a fresh shell: cwd and exported variables are gone."""
        return self.timed_out or self.interrupted or self.shell_exited


class FileKind(enum.StrEnum):
    FILE = "file"
    DIRECTORY = "directory"
    SYMLINK = "symlink"
    """Only in listings: ``stat`` follows links."""
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class FileInfo:
    path: str
    """The path as the sandbox's processes see it."""
    kind: FileKind
    size: int
    mtime: float


@dataclass(frozen=True, slots=True)
class DirEntry:
    name: str
    kind: FileKind
    """The entry itself: a symlink is ``SYMLINK``, never what it points to."""
    size: int
    mtime: float


@dataclass(frozen=True, slots=True)
class DirListing:
    path: str
    """The directory as the sandbox's processes see it."""
    entries: tuple[DirEntry, ...]
    """Sorted by name, at most ``LIST_ENTRY_LIMIT``."""
    total: int
    """How many entries the directory holds; more than ``len(entries)`` when capped."""


@dataclass(frozen=True, slots=True)
class GlobResult:
    paths: tuple[str, ...]
    """Matching paths as the sandbox's processes see them, newest first, capped."""
    total: int
    """How many paths matched; more than ``len(paths)`` when the list was capped."""
    walk_limit_hit: bool = False
    """The walk stopped at ``WALK_ENTRY_LIMIT`` entries; there may be more matches."""
    timed_out: bool = False
    """The walk stopped at ``SEARCH_SECONDS``; there may be more matches."""


@dataclass(frozen=True, slots=True)
class GrepResult:
    lines: tuple[str, ...]
    """``path:line:text`` for each matching line, in path order."""
    truncated: bool = False
    """Output reached ``GREP_OUTPUT_LIMIT`` and the search stopped there."""
    walk_limit_hit: bool = False
    timed_out: bool = False


class Sandbox(Protocol):
    """One agent's workspace and shell. Safe to call from one task at a time per
    method family: concurrent ``exec`` calls run one after another in the shell."""

    @property
    def workspace_path(self) -> str:
        """The workspace root as the sandbox's own processes see it."""
        ...

    # ``timeout`` is the command's own time limit (a result, not an exception),
    # so anyio.fail_after around the call is no substitute.
    async def exec(self, command: str, *, op_key: str, timeout: float) -> ExecResult:  # noqa: ASYNC109
        """Runs ``command`` in the persistent shell; cwd and exported variables persist.

        At most once per ``op_key``: the result is recorded durably before this
        returns, and a later call with a finished op key returns the recorded
        result without running anything. A call whose op key is already running
        in this sandbox waits for that run and returns its result. Raises
        ``ExecInDoubt`` if the op key was started by a process that is gone.
        A timeout kills the shell and returns ``timed_out``; cancellation kills
        the shell's process group, records an ``interrupted`` result and
        re-raises. Either way the next call starts a fresh shell.
        """
        ...

    async def exec_status(self, op_key: str) -> ExecStatus: ...

    async def exec_result(self, op_key: str) -> ExecResult | None:
        """The recorded result of a finished exec, else None."""
        ...

    async def restart_shell(self) -> None:
        """Kills the shell (after any running exec) and starts a fresh one."""
        ...

    async def stat(self, path: str) -> FileInfo:
        """Raises ``FileNotFound`` or ``PathOutsideWorkspace``."""
        ...

    async def read_file(self, path: str, *, max_bytes: int) -> bytes:
        """The whole regular file; ``FileTooLarge`` (with its size) if over ``max_bytes``."""
        ...

    async def read_lines(self, path: str, start: int, end: int, *, max_bytes: int) -> bytes:
        """Lines ``start..end`` (1-based, inclusive; ``end <= 0`` means to the end),
        each with its own line ending, read without loading the whole file.
        ``RangeTooLarge`` if they hold more than ``max_bytes``."""
        ...

    async def write_file(self, path: str, data: bytes) -> None:
        """Creates or truncates the file, creating missing parent directories."""
        ...

    async def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Paths under ``path`` (default: the workspace) matching a doublestar pattern
        (``*``, ``?``, ``[...]``, ``{a,b}``, ``**``), newest first. Symlinked
        directories are not entered. ``InvalidArgument`` for an absolute pattern
        or one with a ``..`` segment."""
        ...

    async def grep(self, pattern: str, path: str | None = None) -> GrepResult:
        """Lines matching a Python regular expression in the file or the tree at
        ``path``; binary files, ``.git``, ``node_modules`` and symlinks skipped.
        ``InvalidArgument`` for a bad pattern."""
        ...

    async def close(self) -> None:
        """Kills the shell and every process it started. Idempotent; later calls
        raise ``SandboxUnavailable``."""
        ...
