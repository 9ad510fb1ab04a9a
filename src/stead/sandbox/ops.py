"""The host protocol's operations: one request type per op and the type of
its reply, shared by the brain's client and the sandbox host.

A request is a JSON object whose ``op`` names its type; ``codec.py`` turns a
frame into one (or raises ``InvalidArgument`` naming the field), and the host
dispatches on the type, so client and server cannot drift apart on an op's
name or fields. Bytes travel base64-encoded (``Bytes``). Every
connection starts with ``Hello``: a host and a brain of different
``PROTOCOL_VERSION``s refuse each other with a message naming both.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    StringConstraints,
)

from stead.jsonvalues import Json
from stead.sandbox.base import (
    DirListing,
    ExecResult,
    ExecStatus,
    FileInfo,
    GlobResult,
    GrepResult,
)

PROTOCOL_VERSION = 11
"""Raised on any change to a request or reply type."""


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise ValueError("expected base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise ValueError("invalid base64") from None


Bytes = Annotated[
    bytes,
    PlainValidator(_bytes),
    PlainSerializer(lambda data: base64.b64encode(data).decode("ascii"), when_used="json"),
]
"""Raw bytes in Python, base64 text on the wire."""
SandboxId = Annotated[str, StringConstraints(min_length=1, max_length=200)]
OpKey = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


class Request(Message):
    reply: ClassVar[Any] = Json
    """The type the host answers with (a record, a ``Message`` or ``Json``)."""


class Hello(Request):
    op: Literal["hello"] = "hello"
    version: int
    token: str | None = None
    """Required over TCP; a Unix socket is guarded by its file mode."""


class Ping(Request):
    """The host's status, with ``host_id`` (its identity, kept in its state
    directory) and ``address`` (where other processes reach it, or None)."""

    op: Literal["ping"] = "ping"


class SandboxRequest(Request):
    sandbox_id: SandboxId
    config: Json | None = None
    """The sandbox's ``SandboxConfig``: with it a host that lost the sandbox
    makes it again; without it the sandbox must exist."""
    secrets_generation: int | None = None
    """The generation of credentials the caller last gave this sandbox: a host
    that holds another one answers ``SecretsOutdated``."""
    placement: int | None = Field(default=None, ge=0)
    """The sandbox's placement as its lease records it (how many times it was
    placed on a host). A host whose copy is of an earlier placement takes the
    workspace from the sandbox's latest snapshot instead; one holding a later
    placement answers ``SandboxMoved``. None: no check (an unleased caller)."""


class Empty(Message):
    pass


class Data(Message):
    data: Bytes


class Acquire(SandboxRequest):
    op: Literal["acquire"] = "acquire"
    wake: bool = False


class Exec(SandboxRequest):
    reply: ClassVar[Any] = ExecResult
    op: Literal["exec"] = "exec"
    command: str
    op_key: OpKey
    timeout: float = Field(gt=0)
    stream: bool = False
    """Send ``Output`` frames while the command runs, before the result."""


class Output(Message):
    """A streaming exec's output, before its result."""

    output: Bytes
    dropped: int = 0
    """Bytes lost before this frame because the caller read too slowly."""


class ExecStatusRequest(SandboxRequest):
    op: Literal["exec_status"] = "exec_status"
    op_key: OpKey


class ExecStatusReply(Message):
    status: ExecStatus
    running: bool


ExecStatusRequest.reply = ExecStatusReply


class ExecResultRequest(SandboxRequest):
    op: Literal["exec_result"] = "exec_result"
    op_key: OpKey
    wait: bool = False
    """Wait for a run of the op key that is still going on first."""


class ExecResultReply(Message):
    result: ExecResult | None


ExecResultRequest.reply = ExecResultReply


class RestartShell(SandboxRequest):
    reply: ClassVar[Any] = Empty
    op: Literal["restart_shell"] = "restart_shell"


class Stat(SandboxRequest):
    reply: ClassVar[Any] = FileInfo
    op: Literal["stat"] = "stat"
    path: str


class ListDir(SandboxRequest):
    reply: ClassVar[Any] = DirListing
    op: Literal["list_dir"] = "list_dir"
    path: str


class ReadFile(SandboxRequest):
    reply: ClassVar[Any] = Data
    op: Literal["read_file"] = "read_file"
    path: str
    max_bytes: int = Field(ge=0)


class ReadLines(SandboxRequest):
    reply: ClassVar[Any] = Data
    op: Literal["read_lines"] = "read_lines"
    path: str
    start: int
    end: int
    max_bytes: int = Field(ge=0)


class WriteFile(SandboxRequest):
    reply: ClassVar[Any] = Empty
    op: Literal["write_file"] = "write_file"
    path: str
    data: Bytes


class Glob(SandboxRequest):
    reply: ClassVar[Any] = GlobResult
    op: Literal["glob"] = "glob"
    pattern: str
    path: str | None = None


class Grep(SandboxRequest):
    reply: ClassVar[Any] = GrepResult
    op: Literal["grep"] = "grep"
    pattern: str
    path: str | None = None


class StartProcess(SandboxRequest):
    op: Literal["start_process"] = "start_process"
    command: str
    name: str | None = None


class ListProcesses(SandboxRequest):
    op: Literal["list_processes"] = "list_processes"


class ProcessList(Message):
    processes: list[Json]


ListProcesses.reply = ProcessList


class ReadProcess(SandboxRequest):
    op: Literal["read_process"] = "read_process"
    process_id: str
    offset: int = Field(default=0, ge=0)


class ProcessOutput(Message):
    data: Bytes
    offset: int
    end: int


ReadProcess.reply = ProcessOutput


class KillProcess(SandboxRequest):
    reply: ClassVar[Any] = Empty
    op: Literal["kill_process"] = "kill_process"
    process_id: str
    signal: int


class Snapshot(SandboxRequest):
    op: Literal["snapshot"] = "snapshot"


class SnapshotReply(Message):
    snapshot: Json | None


Snapshot.reply = SnapshotReply


class Sleep(SandboxRequest):
    op: Literal["sleep"] = "sleep"
    force: bool = True


class Slept(Message):
    slept: bool


Sleep.reply = Slept


class Destroy(Request):
    op: Literal["destroy"] = "destroy"
    sandbox_id: SandboxId
    erase: bool = False
    """No final snapshot, and every snapshot any host saved of the sandbox is
    deleted: its session is gone. Acquired again, it starts empty."""


class Destroyed(Message):
    destroyed: bool
    active_seconds: float


Destroy.reply = Destroyed


class Status(Request):
    """The host's status, or one sandbox's (without making or waking it)."""

    op: Literal["status"] = "status"
    sandbox_id: SandboxId | None = None


CredentialId = Annotated[str, StringConstraints(max_length=200)]
SecretValue = Annotated[str, StringConstraints(max_length=16384)]


RequestPath = Annotated[str, StringConstraints(pattern=r"^/[!-~]{0,1023}$")]


class Credential(Message):
    """A header the egress proxy sets on requests for ``host`` and ``port``
    (under ``paths``, if any)."""

    host: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    port: Annotated[int, Field(ge=1, le=65535)] = 443
    header: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")]
    value: SecretValue
    credential_id: CredentialId = ""
    paths: list[RequestPath] = Field(default_factory=list, max_length=8)

    def __repr__(self) -> str:  # never the value, in a traceback or a log line
        return f"Credential(host={self.host!r}, header={self.header!r}, value=<hidden>)"

    __str__ = __repr__


class SecretVariable(Message):
    """An environment variable ``name`` holding ``placeholder`` in every process
    of the sandbox; the egress proxy replaces the placeholder with ``value`` in
    requests to ``allowed_hosts`` (None: wherever the environment allows), in
    headers and/or the body."""

    credential_id: CredentialId = ""
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
    placeholder: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{16,200}$")]
    value: SecretValue
    allowed_hosts: list[Annotated[str, StringConstraints(max_length=253)]] | None = None
    header: bool = True
    body: bool = True

    def __repr__(self) -> str:  # never the value, in a traceback or a log line
        return f"SecretVariable(name={self.name!r}, value=<hidden>)"

    __str__ = __repr__


class SetSecrets(SandboxRequest):
    """The credentials the sandbox's egress proxy may inject, under a new
    generation. Held in the host's memory only (rule 8); the variables'
    placeholders are set in every process the sandbox starts afterwards."""

    reply: ClassVar[Any] = Empty
    op: Literal["set_secrets"] = "set_secrets"
    generation: int = Field(ge=1)
    credentials: list[Credential]
    variables: list[SecretVariable] = []


class AuditRecord(Message):
    """One request through a sandbox's egress proxy (``egress.AuditEntry``)."""

    seq: int
    time: float
    host: str
    port: int
    method: str
    status: int
    bytes_out: int
    bytes_in: int
    credential_ids: list[str]
    error: str


class EgressAuditReply(Message):
    entries: list[AuditRecord]
    last_seq: int
    """The newest entry's ``seq`` (0: none yet); older ones may have been dropped."""


class EgressAudit(SandboxRequest):
    """A page of the sandbox's egress audit log: entries after ``after``. Never
    holds a credential's value; held in the host's memory only."""

    reply: ClassVar[Any] = EgressAuditReply
    op: Literal["egress_audit"] = "egress_audit"
    after: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1, le=1000)


MountPath = Annotated[str, StringConstraints(min_length=2, max_length=1024)]
RelativePath = Annotated[str, StringConstraints(min_length=1, max_length=1024)]


class MountFile(Message):
    path: RelativePath
    """Relative to the mount."""
    data: Bytes
    executable: bool = False
    """Its mode gets the execute bits (a read-only file: 0555, not 0444)."""


class MountedFile(Message):
    """A regular file under a mount (links and special files are not listed)."""

    path: str
    size: int
    sha256: str
    executable: bool = False
    """Its mode has an execute bit."""


class PutMount(SandboxRequest):
    """Puts ``files`` under the directory ``mount`` (``/mnt/...``), replacing
    files at the same paths: owned by the sandbox user when ``writable``, else
    root's and read-only for it. Mount ops never wake the sandbox."""

    reply: ClassVar[Any] = Empty
    op: Literal["put_mount"] = "put_mount"
    mount: MountPath
    files: list[MountFile] = []
    writable: bool = False


class MountListing(Message):
    files: list[MountedFile]
    truncated: bool = False


class ListMount(SandboxRequest):
    reply: ClassVar[Any] = MountListing
    op: Literal["list_mount"] = "list_mount"
    mount: MountPath


class ReadMount(SandboxRequest):
    reply: ClassVar[Any] = Data
    op: Literal["read_mount"] = "read_mount"
    mount: MountPath
    path: RelativePath
    max_bytes: int = Field(ge=0)


MOUNT_PART_BYTES = 8 * 1024 * 1024
"""Most bytes one ``PutMountPart`` or ``ReadMountPart`` carries: a file of any
size crosses in frames well inside ``MAX_FRAME`` once base64-encoded."""


class PutMountPart(SandboxRequest):
    """One part of a file put under ``mount`` in parts, sent in order: ``offset``
    0 begins it afresh aside, each later part must start where the last ended
    (``InvalidArgument`` otherwise: begin again), and the ``last`` part puts it
    at ``path`` whole, as ``PutMount`` puts a file (a reader never sees part of
    it; a link at ``path`` is replaced, never written through)."""

    reply: ClassVar[Any] = Empty
    op: Literal["put_mount_part"] = "put_mount_part"
    mount: MountPath
    path: RelativePath
    offset: int = Field(ge=0)
    data: Bytes
    last: bool
    writable: bool = False
    executable: bool = False


class MountPart(Message):
    data: Bytes
    size: int
    """The file's size when the part was read."""


class ReadMountPart(SandboxRequest):
    """Up to ``length`` bytes of a regular file under ``mount`` from ``offset``
    (fewer at its end): ``FileNotFound``, ``NotARegularFile``."""

    reply: ClassVar[Any] = MountPart
    op: Literal["read_mount_part"] = "read_mount_part"
    mount: MountPath
    path: RelativePath
    offset: int = Field(ge=0)
    length: int = Field(ge=1, le=MOUNT_PART_BYTES)


class RemoveMount(SandboxRequest):
    """Removes ``paths`` under ``mount`` (None: all of it); missing ones are fine."""

    reply: ClassVar[Any] = Empty
    op: Literal["remove_mount"] = "remove_mount"
    mount: MountPath
    paths: list[RelativePath] | None = None


class Terminal(SandboxRequest):
    """Attaches the connection to a terminal until it ends (``attach.py``)."""

    op: Literal["terminal"] = "terminal"
    terminal_id: str
    kind: Literal["pty", "exec"] = "pty"
    command: str | None = None
    rows: int = 24
    cols: int = 80
    offset: int = Field(default=0, ge=0)


class TerminalData(Message):
    """Output of an attached terminal, from the host (scrollback, then live)."""

    frame: Literal["data"] = "data"
    channel: int
    """1 stdout (all of a PTY's output), 2 stderr."""
    offset: int
    """Absolute offset of ``data``'s first byte in the terminal's output."""
    data: Bytes


class TerminalReplayed(Message):
    frame: Literal["replayed"] = "replayed"
    offset: int


class TerminalExit(Message):
    frame: Literal["exit"] = "exit"
    exit_code: int


class TerminalInput(Message):
    """Bytes for the terminal's stdin, from the brain."""

    frame: Literal["input"] = "input"
    data: Bytes


class TerminalResize(Message):
    frame: Literal["resize"] = "resize"
    rows: int
    cols: int


class TerminalDetach(Message):
    frame: Literal["detach"] = "detach"


class TerminalEnd(Message):
    """The ``Terminal`` call's reply: why the attachment ended."""

    reason: Literal["exited", "detached", "too_slow", "gone"]
    exit_code: int | None = None


Terminal.reply = TerminalEnd

TerminalOutputFrame = Annotated[
    TerminalData | TerminalReplayed | TerminalExit, Field(discriminator="frame")
]
TerminalControlFrame = Annotated[
    TerminalInput | TerminalResize | TerminalDetach, Field(discriminator="frame")
]
AnyRequest = Annotated[
    Hello
    | Ping
    | Acquire
    | Exec
    | ExecStatusRequest
    | ExecResultRequest
    | RestartShell
    | Stat
    | ListDir
    | ReadFile
    | ReadLines
    | WriteFile
    | Glob
    | Grep
    | StartProcess
    | ListProcesses
    | ReadProcess
    | KillProcess
    | Snapshot
    | Sleep
    | Destroy
    | Status
    | SetSecrets
    | EgressAudit
    | PutMount
    | ListMount
    | ReadMount
    | PutMountPart
    | ReadMountPart
    | RemoveMount
    | Terminal,
    Field(discriminator="op"),
]
