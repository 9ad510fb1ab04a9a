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
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteStream

from stead.sandbox.base import (
    WORKSPACE,
    DirEntry,
    DirListing,
    ExecResult,
    ExecStatus,
    FileInfo,
    FileKind,
    GlobResult,
    GrepResult,
)
from stead.sandbox.config import SandboxConfig
from stead.sandbox.errors import (
    HostUnreachable,
    InvalidArgument,
    SandboxNotFound,
    SandboxUnavailable,
)
from stead.sandbox.protocol import (
    FrameStream,
    Json,
    ProtocolError,
    decode_bytes,
    encode_bytes,
    raise_error,
)
from stead.sandbox.terminals import (
    TerminalEnded,
    TerminalEvent,
    TerminalExited,
    TerminalOutput,
    TerminalReplayed,
)

MAX_IDLE_CONNECTIONS = 8


@dataclass(frozen=True, slots=True)
class HostAddress:
    """A Unix socket path, or ``host:port`` with the host's token."""

    unix_path: Path | None = None
    tcp: str | None = None
    token: str | None = None

    def __str__(self) -> str:
        return str(self.unix_path) if self.unix_path is not None else f"tcp://{self.tcp}"


@dataclass(frozen=True, slots=True)
class ClientTimeouts:
    connect: float = 5.0
    call: float = 60.0
    """An ordinary call: a file operation, a status."""
    wake: float = 960.0
    """Added to any call that may wake a sandbox (restore, package install)."""


class HostClient:
    def __init__(self, address: HostAddress, timeouts: ClientTimeouts | None = None) -> None:
        self.address = address
        self.timeouts = timeouts or ClientTimeouts()
        self._idle: list[FrameStream] = []
        self._closed = False

    async def call(
        self,
        op: str,
        *,
        seconds: float | None = None,
        on_output: Callable[[bytes], None] | None = None,
        **args: Any,
    ) -> Json:
        """Sends one request and returns its result; raises the host's
        ``SandboxError`` as is, ``SandboxUnavailable`` when the host cannot be
        reached or does not answer within ``seconds``. ``output`` frames before
        the result (a streaming exec) go to ``on_output``."""
        if self._closed:
            raise SandboxUnavailable("the sandbox host client is closed")
        deadline = seconds if seconds is not None else self.timeouts.call
        frames = await self._connection()
        reply: Json | None = None
        try:
            with anyio.fail_after(deadline):
                await frames.send({"op": op, **args})
                while "output_b64" in (frame := await frames.receive()):
                    if on_output is not None:
                        on_output(decode_bytes(frame["output_b64"]))
                reply = frame
        except TimeoutError:
            raise SandboxUnavailable(
                f"the sandbox host did not answer {op} within {deadline:g} s"
            ) from None
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError, ProtocolError) as exc:
            raise SandboxUnavailable(f"lost the sandbox host during {op}: {exc!r}") from None
        finally:
            if reply is None:
                await _discard(frames)
        await self._release(frames)
        if "error" in reply:
            raise_error(reply)
        result = reply.get("result")
        if not isinstance(result, dict):
            raise SandboxUnavailable(f"the sandbox host sent a malformed answer to {op}")
        return result

    async def _connection(self, *, fresh: bool = False) -> FrameStream:
        if self._idle and not fresh:
            return self._idle.pop()
        try:
            with anyio.fail_after(self.timeouts.connect):
                stream = await self._connect()
                frames = FrameStream(stream)
                if self.address.tcp is not None:
                    await frames.send({"op": "hello", "token": self.address.token})
                    hello = await frames.receive()
                    if "error" in hello:
                        await _discard(frames)
                        raise SandboxUnavailable(f"the sandbox host refused us: {hello}")
                return frames
        except (TimeoutError, OSError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
            raise HostUnreachable(
                f"cannot reach the sandbox host at {self.address}: {exc!r}"
            ) from None

    async def _connect(self) -> ByteStream:
        if self.address.unix_path is not None:
            return await anyio.connect_unix(self.address.unix_path)
        assert self.address.tcp is not None
        host, _, port = self.address.tcp.rpartition(":")
        return await anyio.connect_tcp(host, int(port))

    async def _release(self, frames: FrameStream) -> None:
        if self._closed or len(self._idle) >= MAX_IDLE_CONNECTIONS:
            await _discard(frames)
        else:
            self._idle.append(frames)

    async def open_terminal(self, request: Json) -> HostTerminal:
        """A connection of its own, attached to a terminal: it lasts as long as
        the attachment, with no deadline of its own (keepalives are the
        caller's), and is closed after it."""
        if self._closed:
            raise SandboxUnavailable("the sandbox host client is closed")
        frames = await self._connection(fresh=True)
        try:
            with anyio.fail_after(self.timeouts.call):
                await frames.send({"op": "terminal", **request})
        except BaseException:
            await _discard(frames)
            raise
        return HostTerminal(frames)

    async def ping(self) -> Json:
        return await self.call("ping")

    async def sandbox_status(self, sandbox_id: str) -> Json | None:
        """The sandbox's state, activity and processes, without acquiring or
        waking it; None if the host has no such sandbox (never made, or destroyed)."""
        try:
            return await self.call("status", sandbox_id=sandbox_id)
        except SandboxNotFound:
            return None

    async def destroy(self, sandbox_id: str) -> float | None:
        """Destroys the sandbox (after a final snapshot); its active seconds, or
        None if the host had no such sandbox."""
        result = await self.call(
            "destroy", sandbox_id=sandbox_id, seconds=self.timeouts.call + self.timeouts.wake
        )
        if not result.get("destroyed"):
            return None
        return float(result.get("active_seconds") or 0.0)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for frames in idle:
            await _discard(frames)


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
        if "data_b64" in frame:
            return TerminalOutput(
                int(frame.get("channel", 1)), int(frame["offset"]), decode_bytes(frame["data_b64"])
            )
        if frame.get("replayed"):
            return TerminalReplayed(int(frame["offset"]))
        if "exit" in frame:
            return TerminalExited(int(frame["exit"]))
        await self.aclose()
        if "error" in frame:
            return TerminalEnded("error", str(frame.get("message") or frame.get("fields") or ""))
        result = frame.get("result") or {}
        reason = next(
            (k for k in ("exited", "too_slow", "gone", "detached") if result.get(k)), "gone"
        )
        return TerminalEnded(reason)

    async def send_input(self, data: bytes) -> None:
        await self._send({"input_b64": encode_bytes(data)})

    async def resize(self, rows: int, cols: int) -> None:
        await self._send({"resize": {"rows": rows, "cols": cols}})

    async def detach(self) -> None:
        await self._send({"detach": True})

    async def _send(self, frame: Json) -> None:
        # A failed send means the attachment ended; receive() says how.
        async with self._send_lock:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await self._frames.send(frame)

    async def aclose(self) -> None:
        self.ended = True
        await _discard(self._frames)


class HostSandbox:
    """A sandbox in the sandbox host, behind the ``Sandbox`` interface."""

    def __init__(self, client: HostClient, sandbox_id: str, config: SandboxConfig) -> None:
        self._client = client
        self.sandbox_id = sandbox_id
        self.config = config
        self._closed = False

    @property
    def workspace_path(self) -> str:
        return WORKSPACE

    async def _call(
        self,
        op: str,
        *,
        seconds: float | None = None,
        on_output: Callable[[bytes], None] | None = None,
        **args: Any,
    ) -> Json:
        if self._closed:
            raise SandboxUnavailable("the sandbox is closed")
        timeouts = self._client.timeouts
        budget = (seconds if seconds is not None else timeouts.call) + timeouts.wake
        return await self._client.call(
            op,
            sandbox_id=self.sandbox_id,
            config=self.config.to_json(),
            seconds=budget,
            on_output=on_output,
            **args,
        )

    async def acquire(self, *, wake: bool = False) -> Json:
        return await self._call("acquire", wake=wake)

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
        result = await self._call(
            "exec",
            command=command,
            op_key=op_key,
            timeout=timeout,
            stream=on_output is not None,
            on_output=on_output,
            seconds=timeout + self._client.timeouts.call,
        )
        return ExecResult(**result)

    async def exec_status(self, op_key: str) -> ExecStatus:
        result = await self._call("exec_status", op_key=op_key)
        return ExecStatus(result["status"])

    async def exec_result(self, op_key: str) -> ExecResult | None:
        """The recorded result, waiting first for a run of ``op_key`` that is
        still going on in the host (a brain restart mid-command)."""
        result = await self._call("exec_result", op_key=op_key, wait=True, seconds=24 * 3600.0)
        found = result.get("result")
        return ExecResult(**found) if isinstance(found, dict) else None

    async def restart_shell(self) -> None:
        await self._call("restart_shell")

    async def stat(self, path: str) -> FileInfo:
        result = await self._call("stat", path=path)
        return FileInfo(**{**result, "kind": FileKind(result["kind"])})

    async def list_dir(self, path: str) -> DirListing:
        result = await self._call("list_dir", path=path)
        entries = tuple(
            DirEntry(**{**entry, "kind": FileKind(entry["kind"])}) for entry in result["entries"]
        )
        return DirListing(result["path"], entries, result["total"])

    async def read_file(self, path: str, *, max_bytes: int) -> bytes:
        result = await self._call("read_file", path=path, max_bytes=max_bytes)
        return decode_bytes(result.get("data_b64"))

    async def read_lines(self, path: str, start: int, end: int, *, max_bytes: int) -> bytes:
        result = await self._call(
            "read_lines", path=path, start=start, end=end, max_bytes=max_bytes
        )
        return decode_bytes(result.get("data_b64"))

    async def write_file(self, path: str, data: bytes) -> None:
        await self._call("write_file", path=path, data_b64=encode_bytes(data))

    async def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        result = await self._call("glob", pattern=pattern, path=path)
        return GlobResult(**{**result, "paths": tuple(result["paths"])})

    async def grep(self, pattern: str, path: str | None = None) -> GrepResult:
        result = await self._call("grep", pattern=pattern, path=path)
        return GrepResult(**{**result, "lines": tuple(result["lines"])})

    async def start_process(self, command: str, *, name: str | None = None) -> Json:
        return await self._call("start_process", command=command, name=name)

    async def list_processes(self) -> list[Json]:
        return list((await self._call("list_processes"))["processes"])

    async def read_process(self, process_id: str, offset: int = 0) -> tuple[bytes, int]:
        result = await self._call("read_process", process_id=process_id, offset=offset)
        return decode_bytes(result.get("data_b64")), int(result["offset"])

    async def kill_process(self, process_id: str, signum: int = signal.SIGKILL) -> None:
        await self._call("kill_process", process_id=process_id, signal=int(signum))

    async def snapshot(self) -> Json | None:
        """Saves the workspace now without stopping the sandbox; the snapshot
        that holds it (``id``, ``blob_key``, ``size``, ``sha256``,
        ``created_at``, ``expires_at``), None if it never had a workspace."""
        found = (await self._call("snapshot"))["snapshot"]
        return found if isinstance(found, dict) else None

    async def sleep(self) -> bool:
        return bool((await self._call("sleep", force=True))["slept"])

    async def status(self) -> Json:
        return await self._call("status")

    async def terminal(
        self,
        terminal_id: str,
        *,
        kind: str = "pty",
        command: str | None = None,
        rows: int = 24,
        cols: int = 80,
        offset: int = 0,
    ) -> HostTerminal:
        """Starts the terminal if new (waking the sandbox) and attaches to it,
        replaying its scrollback from ``offset``."""
        if self._closed:
            raise SandboxUnavailable("the sandbox is closed")
        return await self._client.open_terminal(
            {
                "sandbox_id": self.sandbox_id,
                "config": self.config.to_json(),
                "terminal_id": terminal_id,
                "kind": kind,
                "command": command,
                "rows": rows,
                "cols": cols,
                "offset": offset,
            }
        )

    async def close(self) -> None:
        """Forgets the sandbox on this side; it lives on in the host (rule 6)."""
        self._closed = True


def parse_address(value: str, token: str | None = None) -> HostAddress:
    """``unix:///path``, a plain path, or ``tcp://host:port`` (needs ``token``)."""
    if value.startswith("tcp://"):
        if not token:
            raise InvalidArgument("a tcp:// sandbox host address needs a token")
        return HostAddress(tcp=value.removeprefix("tcp://"), token=token)
    return HostAddress(unix_path=Path(value.removeprefix("unix://")))
