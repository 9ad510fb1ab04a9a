"""The brain's side of the body: the ``Sandbox`` protocol, its records and
errors, ``SandboxConfig``, the typed host protocol and its client.

Other brain rooms import only from here; none imports ``stead.sandbox_host``
(the body), which they reach only through the host protocol. ``local/`` is the
workspace itself (files, search, the shell, exec records): the sandbox host
runs it inside each isolated body's reach, and the ``unsafe_local`` provider
runs it in the brain's own process.

The host protocol (``ops``, ``codec``) and its client (``HostClient``,
``HostSandbox``, ``HostTerminal``, ``host_status``) are imported at their first
use (``__getattr__``): a server reaches them only once it first talks to a
host, and one that never does (text-only agents, ``STEAD_SANDBOX=off``) never
pays the protocol's 59 pydantic models, some 35 ms of start-up and 1 MB.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from stead.sandbox.address import (
    ClientTimeouts,
    HostAddress,
    check_token,
    parse_address,
    split_endpoint,
)
from stead.sandbox.base import (
    EXEC_OUTPUT_LIMIT,
    GLOB_RESULT_LIMIT,
    GREP_MAX_LINE_LENGTH,
    GREP_OUTPUT_LIMIT,
    SEARCH_SECONDS,
    WALK_ENTRY_LIMIT,
    WORKSPACE,
    DirEntry,
    DirListing,
    ExecResult,
    ExecStatus,
    FileInfo,
    FileKind,
    GlobResult,
    GrepResult,
    Sandbox,
)
from stead.sandbox.config import SandboxConfig
from stead.sandbox.errors import (
    ExecInDoubt,
    FileError,
    FileNotFound,
    FileTooLarge,
    HostLost,
    HostUnreachable,
    InvalidArgument,
    IsolationUnavailable,
    NoSandbox,
    NotARegularFile,
    PackagesUnavailable,
    PathOutsideWorkspace,
    RangeTooLarge,
    SandboxError,
    SandboxMoved,
    SandboxNotFound,
    SandboxUnavailable,
    SecretsOutdated,
    VersionMismatch,
    WorkspaceUnavailable,
)
from stead.sandbox.mounts import MountedFile, MountFile, MountListing, SandboxMounts
from stead.sandbox.provider import (
    PLACEHOLDER_PREFIX,
    EgressCredential,
    EgressSecret,
    EnvironmentCredential,
    HostIdentity,
    Placement,
    SandboxProvider,
)
from stead.sandbox.providers import host_address, open_provider
from stead.sandbox.terminals import (
    Terminal,
    TerminalEnded,
    TerminalEvent,
    TerminalExited,
    TerminalKind,
    TerminalOutput,
    TerminalReplayed,
    TerminalRequest,
)

if TYPE_CHECKING:
    from stead.sandbox import codec, ops
    from stead.sandbox.admin import HostStatus, host_status
    from stead.sandbox.client import HostClient, HostSandbox, HostTerminal
    from stead.sandbox.ops import PROTOCOL_VERSION

_AT_FIRST_USE = {
    "codec": "stead.sandbox.codec",
    "ops": "stead.sandbox.ops",
    "PROTOCOL_VERSION": "stead.sandbox.ops",
    "HostClient": "stead.sandbox.client",
    "HostSandbox": "stead.sandbox.client",
    "HostTerminal": "stead.sandbox.client",
    "HostStatus": "stead.sandbox.admin",
    "host_status": "stead.sandbox.admin",
}
"""Name -> the module that holds it (a module itself: the name is its last part)."""


def __getattr__(name: str) -> Any:
    where = _AT_FIRST_USE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(where)
    return module if where.endswith(f".{name}") else getattr(module, name)


__all__ = [
    "EXEC_OUTPUT_LIMIT",
    "GLOB_RESULT_LIMIT",
    "GREP_MAX_LINE_LENGTH",
    "GREP_OUTPUT_LIMIT",
    "PLACEHOLDER_PREFIX",
    "PROTOCOL_VERSION",
    "SEARCH_SECONDS",
    "WALK_ENTRY_LIMIT",
    "WORKSPACE",
    "ClientTimeouts",
    "DirEntry",
    "DirListing",
    "EgressCredential",
    "EgressSecret",
    "EnvironmentCredential",
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
    "HostClient",
    "HostIdentity",
    "HostLost",
    "HostSandbox",
    "HostStatus",
    "HostTerminal",
    "HostUnreachable",
    "InvalidArgument",
    "IsolationUnavailable",
    "MountFile",
    "MountListing",
    "MountedFile",
    "NoSandbox",
    "NotARegularFile",
    "PackagesUnavailable",
    "PathOutsideWorkspace",
    "Placement",
    "RangeTooLarge",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxMounts",
    "SandboxMoved",
    "SandboxNotFound",
    "SandboxProvider",
    "SandboxUnavailable",
    "SecretsOutdated",
    "Terminal",
    "TerminalEnded",
    "TerminalEvent",
    "TerminalExited",
    "TerminalKind",
    "TerminalOutput",
    "TerminalReplayed",
    "TerminalRequest",
    "VersionMismatch",
    "WorkspaceUnavailable",
    "check_token",
    "codec",
    "host_address",
    "host_status",
    "open_provider",
    "ops",
    "parse_address",
    "split_endpoint",
]
