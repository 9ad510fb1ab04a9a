"""The sandbox room: an agent's workspace and shell behind the ``Sandbox`` protocol.

Other rooms import only from here. The sandbox knows nothing of sessions,
models or tools (DESIGN §2): it runs commands and touches files inside one
workspace, and records each exec under its op key (DESIGN rule 5).
"""

from __future__ import annotations

from stead.sandbox.backends import UnsafeLocalSandbox
from stead.sandbox.base import (
    EXEC_OUTPUT_LIMIT,
    GLOB_RESULT_LIMIT,
    GREP_MAX_LINE_LENGTH,
    GREP_OUTPUT_LIMIT,
    SEARCH_SECONDS,
    WALK_ENTRY_LIMIT,
    WORKSPACE,
    ExecResult,
    ExecStatus,
    FileInfo,
    FileKind,
    GlobResult,
    GrepResult,
    Sandbox,
)
from stead.sandbox.errors import (
    ExecInDoubt,
    FileError,
    FileNotFound,
    FileTooLarge,
    InvalidArgument,
    IsolationUnavailable,
    NotARegularFile,
    PackagesUnavailable,
    PathOutsideWorkspace,
    RangeTooLarge,
    SandboxError,
    SandboxNotFound,
    SandboxUnavailable,
    WorkspaceUnavailable,
)
from stead.sandbox.host.client import (
    ClientTimeouts,
    HostAddress,
    HostClient,
    HostSandbox,
    parse_address,
)
from stead.sandbox.host.config import HostOptions, SandboxConfig, default_work_dir
from stead.sandbox.host.server import HostAlreadyRunning, serve_host

__all__ = [
    "EXEC_OUTPUT_LIMIT",
    "GLOB_RESULT_LIMIT",
    "GREP_MAX_LINE_LENGTH",
    "GREP_OUTPUT_LIMIT",
    "SEARCH_SECONDS",
    "WALK_ENTRY_LIMIT",
    "WORKSPACE",
    "ClientTimeouts",
    "ExecInDoubt",
    "ExecResult",
    "ExecStatus",
    "FileError",
    "FileInfo",
    "FileKind",
    "FileNotFound",
    "FileTooLarge",
    "GlobResult",
    "GrepResult",
    "HostAddress",
    "HostAlreadyRunning",
    "HostClient",
    "HostOptions",
    "HostSandbox",
    "InvalidArgument",
    "IsolationUnavailable",
    "NotARegularFile",
    "PackagesUnavailable",
    "PathOutsideWorkspace",
    "RangeTooLarge",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxNotFound",
    "SandboxUnavailable",
    "UnsafeLocalSandbox",
    "WorkspaceUnavailable",
    "default_work_dir",
    "parse_address",
    "serve_host",
]
