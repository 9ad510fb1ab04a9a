"""The brain's side of the sandbox host: ``HostClient`` (pooled connections,
a deadline on every call) and ``HostSandbox``, the ``Sandbox`` the agent loop
uses when the sandbox lives in the host.

Every sandbox call carries the sandbox's config, so a host that restarted, or
lost the sandbox, recreates it from the call itself (acquire is idempotent).
A connection that failed or was interrupted mid-call is dropped, never reused:
its next frame could belong to the abandoned call.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import ssl
from collections.abc import Callable
from typing import Any, Protocol

import anyio
from anyio import to_thread
from anyio.abc import ByteStream, SocketAttribute
from anyio.streams.tls import TLSStream

from stead.jsonvalues import Json
from stead.sandbox import codec, ops
from stead.sandbox.address import ClientTimeouts, HostAddress, split_endpoint
from stead.sandbox.base import (
    WORKSPACE,
    DirListing,
    ExecResult,
    ExecStatus,
    FileInfo,
    GlobResult,
    GrepResult,
)
from stead.sandbox.config import SandboxConfig
from stead.sandbox.errors import (
    HostLost,
    HostUnreachable,
    SandboxNotFound,
    SandboxUnavailable,
    SecretsOutdated,
    VersionMismatch,
)
from stead.sandbox.host_tls import client_context, token_authority
from stead.sandbox.protocol import (
    FrameStream,
    ProtocolError,
    raise_error,
)
from stead.sandbox.terminals import (
    TerminalEnded,
    TerminalEvent,
    TerminalExited,
    TerminalKind,
    TerminalOutput,
    TerminalReplayed,
)
from stead.sandbox.unix import connect_unix

MAX_IDLE_CONNECTIONS = 8
OLDER_ANSWER_MAX_FRAME = 64 * 1024
"""Largest answer read from a host asked in plain frames (a refusal is a line)."""
OLDER_REFUSAL = re.compile(r"sandbox host version (\d+)")
"""How a host from before TLS names its version when it refuses a hello."""


class HostClient:
    def __init__(self, address: HostAddress, timeouts: ClientTimeouts | None = None) -> None:
        self.address = address
        self.timeouts = timeouts or ClientTimeouts()
        self._idle: list[FrameStream] = []
        self._closed = False
        self._tls: ssl.SSLContext | None = None
        """Made at the first TCP connection (a scrypt of the token)."""

    async def call(
        self,
        request: ops.Request,
        *,
        seconds: float | None = None,
        on_output: Callable[[bytes], None] | None = None,
    ) -> Any:
        """Sends one request and returns its reply (of ``request.reply``'s type);
        raises the host's ``SandboxError`` as is, ``HostLost`` when the host
        cannot be reached (``HostUnreachable``), the connection breaks or no
        answer comes within ``seconds``. Output frames before the reply (a
        streaming exec) go to ``on_output``."""
        if self._closed:
            raise SandboxUnavailable("the sandbox host client is closed")
        op = type(request).__name__
        deadline = seconds if seconds is not None else self.timeouts.call
        frames = await self._connection()
        reply: Json | None = None
        try:
            with anyio.fail_after(deadline):
                await frames.send(codec.encode(request))
                while "output" in (frame := await frames.receive()):
                    if on_output is not None:
                        on_output(codec.decode_output(frame["output"]))
                reply = frame
        except TimeoutError:
            raise HostLost(
                f"the sandbox host at {self.address} did not answer {op} within {deadline:g} s"
            ) from None
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError, ProtocolError) as exc:
            lost = f"lost the sandbox host at {self.address} during {op}: {exc!r}"
            raise HostLost(lost) from None
        finally:
            if reply is None:
                await _discard(frames)
        await self._release(frames)
        if "error" in reply:
            raise_error(reply)
        try:
            return codec.decode_reply(request, reply.get("result"))
        except ValueError:
            raise SandboxUnavailable(f"the sandbox host sent a malformed answer to {op}") from None

    async def _connection(self, *, fresh: bool = False) -> FrameStream:
        while self._idle and not fresh:
            idle = self._idle.pop()
            if not _peer_closed(idle):
                return idle
            # The host closed it while it sat in the pool (it restarted): a
            # call sent on it would be lost for nothing.
            await _discard(idle)
        frames = None
        try:
            with anyio.fail_after(self.timeouts.connect):
                frames = FrameStream(await self._connect())
                hello = ops.Hello(version=ops.PROTOCOL_VERSION, token=self.address.token)
                await frames.send(codec.encode(hello))
                answer = await frames.receive()
        except (
            TimeoutError,
            OSError,
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            ProtocolError,  # something else answers there: no host is reached
        ) as exc:
            if frames is not None:  # a host that closed it before its hello (it is stopping)
                await _discard(frames)
            raise HostUnreachable(
                f"cannot reach the sandbox host at {self.address}: {exc!r}"
            ) from None
        if "error" in answer:
            await _discard(frames)
            if answer["error"] == VersionMismatch.__name__:
                raise_error(answer)
            raise SandboxUnavailable(f"the sandbox host refused us: {answer.get('message')}")
        return frames

    async def _connect(self) -> ByteStream:
        if self.address.unix_path is not None:
            return await connect_unix(self.address.unix_path)
        assert self.address.tcp is not None and self.address.token is not None
        host, port = split_endpoint(self.address.tcp)
        if self._tls is None:
            authority = await to_thread.run_sync(token_authority, self.address.token)
            self._tls = client_context(authority)
        stream = await anyio.connect_tcp(host, port)
        try:
            return await TLSStream.wrap(
                stream, server_side=False, ssl_context=self._tls, standard_compatible=False
            )
        except BaseException as exc:
            await anyio.aclose_forcefully(stream)
            if isinstance(exc, ssl.SSLCertVerificationError):
                raise HostUnreachable(
                    f"the sandbox host at {self.address} holds another token (its TLS "
                    "certificate is not one STEAD_SANDBOX_HOST_TOKEN makes)"
                ) from None
            if isinstance(exc, ssl.SSLError):
                # Taken for a host that is away, an older one would have its
                # sandboxes moved to this brain's host with only their last
                # snapshot, during a rolling upgrade while it still holds them.
                older = await _plain_hello(host, port)
                if older is not None:
                    raise VersionMismatch(
                        f"the sandbox host at {self.address} speaks host protocol version "
                        f"{older}, in plain TCP, and this brain version {ops.PROTOCOL_VERSION}, "
                        "over TLS: run the same stead version on both"
                    ) from None
                raise HostUnreachable(
                    f"the sandbox host at {self.address} does not speak TLS: a host of a stead "
                    f"older than host protocol {ops.PROTOCOL_VERSION}, or no sandbox host "
                    f"({exc.reason or exc})"
                ) from None
            raise

    async def _release(self, frames: FrameStream) -> None:
        if self._closed or len(self._idle) >= MAX_IDLE_CONNECTIONS:
            await _discard(frames)
        else:
            self._idle.append(frames)

    async def open_terminal(self, request: ops.Terminal) -> HostTerminal:
        """A connection of its own, attached to a terminal: it lasts as long as
        the attachment, with no deadline of its own (keepalives are the
        caller's), and is closed after it."""
        if self._closed:
            raise SandboxUnavailable("the sandbox host client is closed")
        frames = await self._connection(fresh=True)
        try:
            with anyio.fail_after(self.timeouts.call):
                await frames.send(codec.encode(request))
        except BaseException:
            await _discard(frames)
            raise
        return HostTerminal(frames)

    async def ping(self) -> Json:
        reply: Json = await self.call(ops.Ping())
        return reply

    async def sandbox_status(self, sandbox_id: str) -> Json | None:
        """The sandbox's state, activity and processes, without acquiring or
        waking it; None if the host has no such sandbox (never made, or destroyed)."""
        try:
            reply: Json = await self.call(ops.Status(sandbox_id=sandbox_id))
            return reply
        except SandboxNotFound:
            return None

    async def sandbox_egress_audit(self, sandbox_id: str, after: int, limit: int) -> Json | None:
        """The sandbox's egress audit entries after ``after`` and the newest entry's
        seq, without acquiring or waking it; None if the host has no such sandbox."""
        try:
            reply: ops.EgressAuditReply = await self.call(
                ops.EgressAudit(sandbox_id=sandbox_id, after=after, limit=limit)
            )
        except SandboxNotFound:
            return None
        return reply.model_dump(mode="json")

    async def destroy(self, sandbox_id: str, *, erase: bool = False) -> float | None:
        """Destroys the sandbox (after a final snapshot, unless ``erase``:
        ``ops.Destroy``); its active seconds, or None if the host had no such
        sandbox."""
        result: ops.Destroyed = await self.call(
            ops.Destroy(sandbox_id=sandbox_id, erase=erase),
            seconds=self.timeouts.call + self.timeouts.wake,
        )
        return result.active_seconds if result.destroyed else None

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for frames in idle:
            await _discard(frames)


def _peer_closed(frames: FrameStream) -> bool:
    """Whether the host closed an idle connection (it has no call to answer,
    so anything readable on it is its end)."""
    raw = frames.stream.extra(SocketAttribute.raw_socket, None)
    if raw is None:
        return False
    try:
        # A duplicate descriptor: the event loop's socket wrapper cannot peek.
        with socket.socket(raw.family, raw.type, fileno=os.dup(raw.fileno())) as peek:
            return peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


async def _plain_hello(host: str, port: int) -> int | None:
    """The version of a host of a stead from before TLS (host protocol 8 and
    older), which reads plain frames: asked in one, without the token, it
    refuses our version naming its own. None when what answers is no such host."""
    try:
        async with await anyio.connect_tcp(host, port) as stream:
            frames = FrameStream(stream)
            await frames.send(codec.encode(ops.Hello(version=ops.PROTOCOL_VERSION)))
            answer = await frames.receive(limit=OLDER_ANSWER_MAX_FRAME)
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError, ProtocolError):
        return None
    if not isinstance(answer, dict) or answer.get("error") != VersionMismatch.__name__:
        return None
    found = OLDER_REFUSAL.search(str(answer.get("message")))
    version = int(found.group(1)) if found else None
    # One of this version answers plain frames so only when our TLS failed it.
    return version if version != ops.PROTOCOL_VERSION else None


async def _discard(frames: FrameStream) -> None:
    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
        await frames.aclose()


class HostTerminal:
    """One attachment to a terminal in the sandbox host (``host/attach.py``)."""

    def __init__(self, frames: FrameStream) -> None:
        self._frames = frames
        self._send_lock = anyio.Lock()
        self.ended = False

    async def receive(self) -> TerminalEvent:
        """The next event; ``TerminalEnded`` last (then the connection is closed)."""
        if self.ended:
            return TerminalEnded("gone")
        try:
            frame = await self._frames.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError, ProtocolError):
            await self.aclose()
            return TerminalEnded("gone")
        if "result" not in frame and "error" not in frame:
            try:
                event = codec.parse_terminal_output(frame)
            except ValueError:
                await self.aclose()
                return TerminalEnded("error", "the sandbox host sent a malformed terminal frame")
            if isinstance(event, ops.TerminalData):
                return TerminalOutput(event.channel, event.offset, event.data)
            if isinstance(event, ops.TerminalReplayed):
                return TerminalReplayed(event.offset)
            return TerminalExited(event.exit_code)
        await self.aclose()
        if "error" in frame:
            return TerminalEnded("error", str(frame.get("message") or frame.get("fields") or ""))
        try:
            end = ops.TerminalEnd.model_validate(frame["result"], strict=False)
        except ValueError:
            return TerminalEnded("gone")
        return TerminalEnded(end.reason)

    async def send_input(self, data: bytes) -> None:
        await self._send(ops.TerminalInput(data=data))

    async def resize(self, rows: int, cols: int) -> None:
        await self._send(ops.TerminalResize(rows=rows, cols=cols))

    async def detach(self) -> None:
        await self._send(ops.TerminalDetach())

    async def _send(self, frame: ops.Message) -> None:
        # A failed send means the attachment ended; receive() says how.
        async with self._send_lock:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await self._frames.send(codec.encode(frame))

    async def aclose(self) -> None:
        self.ended = True
        await _discard(self._frames)


class SecretsBook(Protocol):
    """Where a ``HostSandbox`` finds the credentials its egress proxy should
    hold, to send them again to a host that lost them (it restarted)."""

    def generation(self, sandbox_id: str) -> int | None: ...

    async def resend(self, sandbox: HostSandbox) -> None: ...


class HostSandbox:
    """A sandbox in the sandbox host, behind the ``Sandbox`` interface."""

    def __init__(
        self,
        client: HostClient,
        sandbox_id: str,
        config: SandboxConfig,
        secrets: SecretsBook | None = None,
        *,
        placement: int | None = None,
    ) -> None:
        """``placement``: the sandbox's placement as its lease records it, sent
        with every call (``ops.SandboxRequest.placement``)."""
        self._client = client
        self.sandbox_id = sandbox_id
        self.config = config
        self._secrets = secrets
        self.placement = placement
        self._closed = False

    @property
    def client(self) -> HostClient:
        return self._client

    @property
    def workspace_path(self) -> str:
        return WORKSPACE

    def _fields(self) -> Json:
        generation = self._secrets.generation(self.sandbox_id) if self._secrets else None
        return {
            "sandbox_id": self.sandbox_id,
            "config": self.config.to_json(),
            "secrets_generation": generation,
            "placement": self.placement,
        }

    async def _call(
        self,
        kind: type[ops.SandboxRequest],
        *,
        seconds: float | None = None,
        on_output: Callable[[bytes], None] | None = None,
        **args: Any,
    ) -> Any:
        if self._closed:
            raise SandboxUnavailable("the sandbox is closed")
        timeouts = self._client.timeouts
        budget = (seconds if seconds is not None else timeouts.call) + timeouts.wake
        for attempt in (1, 2):
            request = kind(**self._fields(), **args)
            try:
                return await self._client.call(request, seconds=budget, on_output=on_output)
            except SecretsOutdated:
                if attempt == 2 or self._secrets is None:
                    raise
                await self._secrets.resend(self)
        raise AssertionError("unreachable")

    async def acquire(self, *, wake: bool = False) -> Json:
        reply: Json = await self._call(ops.Acquire, wake=wake)
        return reply

    async def exec(
        self,
        command: str,
        *,
        op_key: str,
        timeout: float,  # noqa: ASYNC109 - the command's own limit, a result
        on_output: Callable[[bytes], None] | None = None,
    ) -> ExecResult:
        """``Sandbox.exec``; with ``on_output``, the output also streams to it as
        the command runs (the result stays the authoritative copy)."""
        result: ExecResult = await self._call(
            ops.Exec,
            command=command,
            op_key=op_key,
            timeout=timeout,
            stream=on_output is not None,
            on_output=on_output,
            seconds=timeout + self._client.timeouts.call,
        )
        return result

    async def exec_status(self, op_key: str) -> ExecStatus:
        reply: ops.ExecStatusReply = await self._call(ops.ExecStatusRequest, op_key=op_key)
        return reply.status

    async def exec_result(self, op_key: str) -> ExecResult | None:
        """The recorded result, waiting first for a run of ``op_key`` that is
        still going on in the host (a brain restart mid-command)."""
        reply: ops.ExecResultReply = await self._call(
            ops.ExecResultRequest, op_key=op_key, wait=True, seconds=24 * 3600.0
        )
        return reply.result

    async def restart_shell(self) -> None:
        await self._call(ops.RestartShell)

    async def stat(self, path: str) -> FileInfo:
        info: FileInfo = await self._call(ops.Stat, path=path)
        return info

    async def list_dir(self, path: str) -> DirListing:
        listing: DirListing = await self._call(ops.ListDir, path=path)
        return listing

    async def read_file(self, path: str, *, max_bytes: int) -> bytes:
        reply: ops.Data = await self._call(ops.ReadFile, path=path, max_bytes=max_bytes)
        return reply.data

    async def read_lines(self, path: str, start: int, end: int, *, max_bytes: int) -> bytes:
        reply: ops.Data = await self._call(
            ops.ReadLines, path=path, start=start, end=end, max_bytes=max_bytes
        )
        return reply.data

    async def write_file(self, path: str, data: bytes) -> None:
        await self._call(ops.WriteFile, path=path, data=data)

    async def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        result: GlobResult = await self._call(ops.Glob, pattern=pattern, path=path)
        return result

    async def grep(self, pattern: str, path: str | None = None) -> GrepResult:
        result: GrepResult = await self._call(ops.Grep, pattern=pattern, path=path)
        return result

    async def start_process(self, command: str, *, name: str | None = None) -> Json:
        reply: Json = await self._call(ops.StartProcess, command=command, name=name)
        return reply

    async def list_processes(self) -> list[Json]:
        reply: ops.ProcessList = await self._call(ops.ListProcesses)
        return reply.processes

    async def read_process(self, process_id: str, offset: int = 0) -> tuple[bytes, int]:
        reply: ops.ProcessOutput = await self._call(
            ops.ReadProcess, process_id=process_id, offset=offset
        )
        return reply.data, reply.offset

    async def kill_process(self, process_id: str, signum: int = signal.SIGKILL) -> None:
        await self._call(ops.KillProcess, process_id=process_id, signal=int(signum))

    async def snapshot(self) -> Json | None:
        """Saves the workspace now without stopping the sandbox; the snapshot
        that holds it (``id``, ``blob_key``, ``size``, ``sha256``,
        ``created_at``, ``expires_at``), None if it never had a workspace."""
        reply: ops.SnapshotReply = await self._call(ops.Snapshot)
        return reply.snapshot

    async def sleep(self) -> bool:
        reply: ops.Slept = await self._call(ops.Sleep, force=True)
        return reply.slept

    async def status(self) -> Json:
        reply: Json = await self._client.call(ops.Status(sandbox_id=self.sandbox_id))
        return reply

    async def set_secrets(
        self,
        generation: int,
        credentials: list[ops.Credential],
        variables: list[ops.SecretVariable] | None = None,
    ) -> None:
        """Hands the sandbox's egress proxy these credentials (memory only)."""
        fields = {**self._fields(), "secrets_generation": None}
        request = ops.SetSecrets(
            **fields, generation=generation, credentials=credentials, variables=variables or []
        )
        timeouts = self._client.timeouts
        await self._client.call(request, seconds=timeouts.call + timeouts.wake)

    async def egress_audit(self, *, after: int = 0, limit: int = 100) -> ops.EgressAuditReply:
        """Entries of the sandbox's egress audit log after ``after`` (oldest first);
        never a credential's value."""
        reply: ops.EgressAuditReply = await self._call(ops.EgressAudit, after=after, limit=limit)
        return reply

    async def terminal(
        self,
        terminal_id: str,
        *,
        kind: TerminalKind = "pty",
        command: str | None = None,
        rows: int = 24,
        cols: int = 80,
        offset: int = 0,
    ) -> HostTerminal:
        """Starts the terminal if new (waking the sandbox) and attaches to it,
        replaying its scrollback from ``offset``."""
        if self._closed:
            raise SandboxUnavailable("the sandbox is closed")
        request = ops.Terminal(
            **self._fields(),
            terminal_id=terminal_id,
            kind=kind,
            command=command,
            rows=rows,
            cols=cols,
            offset=offset,
        )
        return await self._client.open_terminal(request)

    async def close(self) -> None:
        """Forgets the sandbox on this side; it lives on in the host (rule 6)."""
        self._closed = True
