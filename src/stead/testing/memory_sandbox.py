"""``MemoryProvider``: an in-memory fake behind ``SandboxProvider``, for tests
of the rooms above the sandbox that need no real process or file.

It passes the same conformance suite as the real providers
(``tests/sandbox/test_providers.py``). Files live in a dict; commands are
answered by ``commands`` (by default a tiny interpreter of ``echo``, ``cat
PATH`` and ``exit N``), and every exec is recorded under its op key exactly
as a real sandbox records it, so at-most-once behaviour is the real rule.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from stead.sandbox import (
    WORKSPACE,
    EgressSecret,
    ExecResult,
    ExecStatus,
    FileInfo,
    FileKind,
    FileNotFound,
    FileTooLarge,
    GlobResult,
    GrepResult,
    HostIdentity,
    InvalidArgument,
    NoSandbox,
    PathOutsideWorkspace,
    Placement,
    RangeTooLarge,
    Sandbox,
    SandboxConfig,
    SandboxMounts,
    SandboxUnavailable,
    Terminal,
    TerminalRequest,
)

Json = dict[str, object]
Commands = Callable[[str, "MemorySandbox"], ExecResult]


def interpret(command: str, sandbox: MemorySandbox) -> ExecResult:
    """``echo WORDS``, ``cat PATH`` and ``exit N``; anything else is "not found"."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return ExecResult(f"bash: {exc}\n", 2)
    if not words:
        return ExecResult("", 0)
    if words[0] == "echo":
        return ExecResult(" ".join(words[1:]) + "\n", 0)
    if words[0] == "exit" and len(words) == 2 and words[1].isdigit():
        return ExecResult("", int(words[1]))
    if words[0] == "cat" and len(words) == 2:
        found = sandbox.files.get(sandbox.key(words[1]))
        if found is None:
            return ExecResult(f"cat: {words[1]}: No such file or directory\n", 1)
        return ExecResult(found.decode(errors="replace"), 0)
    return ExecResult(f"bash: {words[0]}: command not found\n", 127)


@dataclass
class MemorySandbox:
    commands: Commands = interpret
    files: dict[str, bytes] = field(default_factory=dict)
    """Workspace-relative path -> content."""
    records: dict[str, ExecResult] = field(default_factory=dict)
    secrets: tuple[EgressSecret, ...] = ()
    """What an egress proxy would hold: never part of the files."""
    created: float = field(default_factory=time.monotonic)
    closed: bool = False

    @property
    def workspace_path(self) -> str:
        return WORKSPACE

    def key(self, path: str) -> str:
        if "\0" in path:
            raise InvalidArgument("path: contains a NUL byte")
        joined = posixpath.normpath(posixpath.join(WORKSPACE, path))
        if joined != WORKSPACE and not joined.startswith(WORKSPACE + "/"):
            raise PathOutsideWorkspace(path)
        return joined.removeprefix(WORKSPACE).lstrip("/")

    def _open(self) -> None:
        if self.closed:
            raise SandboxUnavailable("the sandbox is closed")

    async def exec(self, command: str, *, op_key: str, timeout: float) -> ExecResult:  # noqa: ASYNC109
        self._open()
        found = self.records.get(op_key)
        if found is None:
            found = self.records[op_key] = self.commands(command, self)
        return found

    async def exec_status(self, op_key: str) -> ExecStatus:
        return ExecStatus.FINISHED if op_key in self.records else ExecStatus.UNKNOWN

    async def exec_result(self, op_key: str) -> ExecResult | None:
        return self.records.get(op_key)

    async def restart_shell(self) -> None:
        self._open()

    async def stat(self, path: str) -> FileInfo:
        self._open()
        key = self.key(path)
        shown = posixpath.join(WORKSPACE, key) if key else WORKSPACE
        if key in self.files:
            return FileInfo(shown, FileKind.FILE, len(self.files[key]), self.created)
        if not key or any(name.startswith(key + "/") for name in self.files):
            return FileInfo(shown, FileKind.DIRECTORY, 0, self.created)
        raise FileNotFound(path)

    async def read_file(self, path: str, *, max_bytes: int) -> bytes:
        self._open()
        found = self.files.get(self.key(path))
        if found is None:
            raise FileNotFound(path)
        if len(found) > max_bytes:
            raise FileTooLarge(path, len(found), max_bytes)
        return found

    async def read_lines(self, path: str, start: int, end: int, *, max_bytes: int) -> bytes:
        lines = (await self.read_file(path, max_bytes=2**62)).splitlines(keepends=True)
        chosen = b"".join(lines[max(start, 1) - 1 : end if end > 0 else None])
        if len(chosen) > max_bytes:
            raise RangeTooLarge(path, start, end, max_bytes)
        return chosen

    async def write_file(self, path: str, data: bytes) -> None:
        self._open()
        self.files[self.key(path)] = bytes(data)

    async def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        self._open()
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise InvalidArgument(f"pattern: {pattern!r} must be relative, without '..'")
        base = self.key(path or ".")
        found = tuple(
            posixpath.join(WORKSPACE, name)
            for name in sorted(self.files)
            if name.startswith(base) and fnmatch.fnmatch(name[len(base) :].lstrip("/"), pattern)
        )
        return GlobResult(found, len(found))

    async def grep(self, pattern: str, path: str | None = None) -> GrepResult:
        self._open()
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise InvalidArgument(f"pattern: {exc}") from None
        base = self.key(path or ".")
        lines = tuple(
            f"{posixpath.join(WORKSPACE, name)}:{number}:{line}"
            for name in sorted(self.files)
            if name.startswith(base)
            for number, line in enumerate(self.files[name].decode(errors="replace").splitlines(), 1)
            if regex.search(line)
        )
        return GrepResult(lines)

    async def close(self) -> None:
        self.closed = True


class MemoryProvider:
    """Sandboxes that live as long as this object; no terminals."""

    leased = False

    def __init__(self, commands: Commands = interpret) -> None:
        self._commands = commands
        self.sandboxes: dict[str, MemorySandbox] = {}

    async def home(self) -> HostIdentity | None:
        return None  # in this process: never placed

    def place(self, sandbox_id: str, placement: Placement | None) -> bool:
        return False

    async def acquire(self, sandbox_id: str, config: SandboxConfig) -> Sandbox:
        found = self.sandboxes.get(sandbox_id)
        if found is None:
            found = self.sandboxes[sandbox_id] = MemorySandbox(self._commands)
        return found

    async def status(self, sandbox_id: str) -> Json | None:
        found = self.sandboxes.get(sandbox_id)
        if found is None:
            return None
        return {
            "state": "active",
            "idle_seconds": 0.0,
            "active_seconds": time.monotonic() - found.created,
            "processes": [],
            "terminals": [],
            "last_error": None,
        }

    async def egress_audit(self, sandbox_id: str, after: int, limit: int) -> Json | None:
        return None  # no network at all, so no egress to log

    async def terminal(
        self, sandbox_id: str, config: SandboxConfig, request: TerminalRequest
    ) -> Terminal:
        raise NoSandbox("the in-memory sandbox has no terminals")

    async def set_secrets(
        self, sandbox_id: str, config: SandboxConfig, secrets: Sequence[EgressSecret]
    ) -> None:
        sandbox = await self.acquire(sandbox_id, config)
        assert isinstance(sandbox, MemorySandbox)
        sandbox.secrets = tuple(secrets)

    def mounts(self) -> SandboxMounts | None:
        return None

    def forget(self, sandbox_id: str) -> None:
        pass  # not leased: its sandboxes are this process's own, which no other destroys

    async def release(self, sandbox_id: str, *, erase: bool = False) -> float | None:
        # Nothing outlives a release here: erased or not, the files go.
        found = self.sandboxes.pop(sandbox_id, None)
        if found is None:
            return None
        await found.close()
        return time.monotonic() - found.created

    async def aclose(self) -> None:
        for sandbox in self.sandboxes.values():
            await sandbox.close()
        self.sandboxes.clear()
