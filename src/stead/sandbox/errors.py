"""Sandbox errors. ``str(error)`` is safe to show the model: it names paths as the
caller spelled them, never the host's real paths. ``tools/`` turns them into tool
errors; nothing else in the sandbox room raises on purpose.

SandboxError                 base; ``retryable`` says whether the same call may succeed later
├── InvalidArgument          a malformed request: NUL in a path, a bad regex, a ``..`` glob
├── PathOutsideWorkspace     the path resolves outside the workspace (``..``, an absolute
│                            path elsewhere, or a symlink that leads out)
├── FileError                a file operation failed; ``reason`` is a short lower-case phrase
│   ├── FileNotFound         no such file or directory
│   ├── NotARegularFile      a directory, FIFO, socket or device where a file was expected
│   ├── FileTooLarge         the file is bigger than the caller's ``max_bytes`` (``size``)
│   └── RangeTooLarge        the requested lines hold more than ``max_bytes``
├── ExecInDoubt              an exec under this op key started earlier and its outcome is
│                            unknown (the process that ran it is gone): verify, do not re-run
├── WorkspaceUnavailable     the saved workspace is missing, corrupt or expired; never
│                            replaced by an empty one (rule 6). Not retryable
├── NoSandbox                this server's provider gives sessions no sandbox (``off``),
│                            or cannot do what was asked (terminals without the host)
├── SecretsOutdated          the host holds older credentials for the sandbox than the
│                            call expects (it restarted): the client sends them again
├── VersionMismatch          the brain and the sandbox host speak different protocol
│                            versions; the message names both. Not retryable
└── SandboxUnavailable       the sandbox is closed or its shell cannot start (retryable)
    ├── IsolationUnavailable the machine cannot isolate sandboxes (no bubblewrap, no user
    │                        namespaces, no writable cgroups, not root, no uid range of the
    │                        host's own or none left in it); ``reason`` says
    │                        what is missing and how to fix it. Not retryable: an operator
    │                        must act (DESIGN rule 7)
    ├── PackagesUnavailable  the environment's packages could not be installed; the
    │                        message carries the installer's last output. Not retryable
    ├── SandboxNotFound      the sandbox host has no such sandbox (destroyed, or the host
    │                        lost it); the client acquires it again
    ├── SandboxMoved         the call names an older placement of the sandbox than the
    │                        host holds: the caller's lease is stale, nothing ran
    └── HostLost             the sandbox host did not answer: the connection broke or
        │                    the call timed out, so the call may have run (raised by the
        │                    brain's client only)
        └── HostUnreachable  no connection to the sandbox host could be made, so nothing
                             of the call was sent
"""

from __future__ import annotations

from typing import ClassVar


class SandboxError(Exception):
    """Base of every error the sandbox raises on purpose."""

    retryable: ClassVar[bool] = False


class InvalidArgument(SandboxError):
    pass


class PathOutsideWorkspace(SandboxError):
    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"path {path!r} is outside the workspace")


class FileError(SandboxError):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class FileNotFound(FileError):
    def __init__(self, path: str) -> None:
        super().__init__(path, "no such file or directory")


class NotARegularFile(FileError):
    def __init__(self, path: str) -> None:
        super().__init__(path, "not a regular file")


class FileTooLarge(FileError):
    def __init__(self, path: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(path, f"is {size} bytes, exceeds {limit}-byte limit")


class RangeTooLarge(FileError):
    def __init__(self, path: str, start: int, end: int, limit: int) -> None:
        self.start = start
        self.end = end
        self.limit = limit
        super().__init__(path, f"lines {start} to {end} exceed {limit}-byte limit")


class ExecInDoubt(SandboxError):
    def __init__(self, op_key: str) -> None:
        self.op_key = op_key
        super().__init__(
            "this command was started earlier and may have run; its outcome is unknown. "
            "Verify its effects before running it again"
        )


class SandboxUnavailable(SandboxError):
    retryable: ClassVar[bool] = True


class HostLost(SandboxUnavailable):
    """The host did not answer (the brain's client raises it, never the host):
    when it lasts, the host may be gone, and the sandbox moves to another."""


class HostUnreachable(HostLost):
    pass


class SandboxMoved(SandboxUnavailable):
    """The sandbox was placed on a host again since the caller read its lease."""


class IsolationUnavailable(SandboxUnavailable):
    """The host refuses to start sandboxes: isolation cannot be provided (rule 7).

    Meant for the operator as much as the caller, so ``reason`` may name host paths
    such as a cgroup directory; it never names a workspace path.
    """

    retryable: ClassVar[bool] = False

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class SandboxNotFound(SandboxUnavailable):
    """The sandbox host has no such sandbox (never acquired, or destroyed)."""


class NoSandbox(SandboxError):
    """The provider has no sandbox for this: the message says why and what the
    operator can change."""


class SecretsOutdated(SandboxError):
    """The host's credentials for this sandbox are not the generation the call
    expects (the host restarted, and holds secrets in memory only)."""

    retryable: ClassVar[bool] = True


class VersionMismatch(SandboxError):
    """The peer speaks another version of the host protocol."""


class WorkspaceUnavailable(SandboxError):
    """The sandbox's saved workspace cannot be restored: its snapshot is missing,
    corrupt or expired. Never papered over with an empty workspace (rule 6)."""


class PackagesUnavailable(SandboxUnavailable):
    """The environment's ``packages`` could not be installed. A package list that
    failed once fails again, so the caller reports it instead of retrying."""

    retryable: ClassVar[bool] = False
