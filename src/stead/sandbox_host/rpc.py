"""The host's side of the host protocol (``stead.sandbox.ops``): each
connection opens with ``Hello`` (the protocol version, and over TCP the
token), then carries one call at a time, dispatched on the request's type.

A malformed or unknown request gets a typed ``InvalidArgument`` naming the
field, and a bug in one call answers ``SandboxUnavailable``: the host stays
up either way. Credentials from ``SetSecrets`` are handed to the sandbox's
egress proxy and kept in memory only (rule 8).
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from functools import partial
from typing import Any, TypeVar

import anyio
from anyio import to_thread

from stead.egress_policy import InvalidPolicy
from stead.jsonvalues import Json
from stead.sandbox import (
    FileError,
    HostIdentity,
    InvalidArgument,
    SandboxConfig,
    SandboxError,
    SandboxNotFound,
    SandboxUnavailable,
    SecretsOutdated,
    VersionMismatch,
    codec,
    ops,
)
from stead.sandbox.protocol import FrameStream, ProtocolError, error_frame
from stead.sandbox_host.attach import attach
from stead.sandbox_host.lifecycle import HostedSandbox
from stead.sandbox_host.manager import SandboxManager
from stead.sandbox_host.processes import Kind
from stead.sandbox_host.sandbox_egress import egress_policy

log = logging.getLogger("stead.sandbox.host")

T = TypeVar("T")

HELLO_SECONDS = 10.0
HELLO_MAX_FRAME = 64 * 1024
"""Largest first frame: a ``Hello`` holds a version and a token. Anyone who can
reach a TCP listener may send one, so it must not make the host buffer a
whole ``MAX_FRAME`` (64 MiB) per connection before the token is checked."""
GOODBYE_SECONDS = 30.0
"""How long a terminal client may take to read up to its attachment's end."""

Handler = Callable[[Any, FrameStream], Awaitable[Any]]


class HostRpc:
    def __init__(
        self, manager: SandboxManager, *, token: str | None, identity: HostIdentity
    ) -> None:
        self._manager = manager
        self._token = token
        self._identity = identity
        self.handlers: dict[type[ops.Request], Handler] = {
            ops.Ping: self._ping,
            ops.Acquire: self._acquire,
            ops.Exec: self._exec,
            ops.ExecStatusRequest: self._exec_status,
            ops.ExecResultRequest: self._exec_result,
            ops.RestartShell: self._restart_shell,
            ops.Stat: self._stat,
            ops.ListDir: self._list_dir,
            ops.ReadFile: self._read_file,
            ops.ReadLines: self._read_lines,
            ops.WriteFile: self._write_file,
            ops.Glob: self._glob,
            ops.Grep: self._grep,
            ops.StartProcess: self._start_process,
            ops.ListProcesses: self._list_processes,
            ops.ReadProcess: self._read_process,
            ops.KillProcess: self._kill_process,
            ops.Snapshot: self._snapshot,
            ops.Sleep: self._sleep,
            ops.Destroy: self._destroy,
            ops.Status: self._status,
            ops.SetSecrets: self._set_secrets,
            ops.EgressAudit: self._egress_audit,
            ops.PutMount: self._put_mount,
            ops.ListMount: self._list_mount,
            ops.ReadMount: self._read_mount,
            ops.PutMountPart: self._put_mount_part,
            ops.ReadMountPart: self._read_mount_part,
            ops.RemoveMount: self._remove_mount,
            ops.Terminal: self._terminal,
        }
        """Every request type but ``Hello`` (the connection's first frame)."""

    async def serve_connection(self, frames: FrameStream, *, tcp: bool) -> None:
        try:
            if not await self._hello(frames, tcp=tcp):
                return
            while True:
                try:
                    frame = await frames.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    return
                reply = await self.call(frame, frames)
                if frame.get("op") == "terminal":
                    # The attachment is over; only its goodbye is left, behind
                    # whatever output a dropped (too slow) client has still to
                    # read. It gets a bounded wait, and since it may still be
                    # sending input, its connection ends here.
                    with anyio.move_on_after(GOODBYE_SECONDS):
                        await frames.send(reply)
                    return
                await frames.send(reply)
        except ProtocolError as exc:
            with contextlib.suppress(Exception):
                await frames.send(error_frame(InvalidArgument(str(exc))))
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the caller went away; what it started has finished or goes on
        except Exception:  # one connection's bug must never take the host down
            log.exception("sandbox host connection failed")
        finally:
            with contextlib.suppress(Exception):
                await frames.aclose()

    async def _hello(self, frames: FrameStream, *, tcp: bool) -> bool:
        with anyio.move_on_after(HELLO_SECONDS):
            frame = await frames.receive(limit=HELLO_MAX_FRAME)
            try:
                hello = codec.parse_request(frame)
                if not isinstance(hello, ops.Hello):
                    raise InvalidArgument("op: a connection starts with hello")
                if hello.version != ops.PROTOCOL_VERSION:
                    raise VersionMismatch(
                        f"the brain speaks host protocol version {hello.version} and this "
                        f"sandbox host version {ops.PROTOCOL_VERSION}: run the same stead "
                        "version on both"
                    )
                if tcp and not _token_matches(hello.token, self._token):
                    raise InvalidArgument("token: bad or missing token")
            except SandboxError as exc:
                await frames.send(error_frame(exc))
                return False
            await frames.send({"result": {"version": ops.PROTOCOL_VERSION}})
            return True
        return False

    async def call(self, frame: Json, frames: FrameStream) -> Json:
        op = frame.get("op")
        try:
            request = codec.parse_request(frame)
            handler = self.handlers.get(type(request))
            if handler is None:
                raise InvalidArgument(f"op: {op!r} is not a call")
            return {"result": codec.encode(await handler(request, frames))}
        except SandboxError as exc:
            return error_frame(exc)
        except ProtocolError as exc:
            return error_frame(InvalidArgument(str(exc)))
        except Exception as exc:
            log.exception("sandbox host call %s failed", op)
            return error_frame(SandboxUnavailable(f"the sandbox host failed: {exc}"))

    async def _sandbox(self, request: ops.SandboxRequest) -> HostedSandbox:
        if request.config is None:
            sandbox = await self._manager.get(request.sandbox_id, request.placement)
        else:
            config = _config(request.config)
            sandbox = await self._manager.acquire(request.sandbox_id, config, request.placement)
        generation = request.secrets_generation
        if generation is not None and self._manager.secrets_generation(sandbox.id) != generation:
            raise SecretsOutdated(f"send generation {generation} of the credentials again")
        return sandbox

    async def _ping(self, request: ops.Ping, frames: FrameStream) -> Json:
        return {
            "version": ops.PROTOCOL_VERSION,
            "pid": os.getpid(),
            "host_id": self._identity.host_id,
            "address": self._identity.address,
            **self._manager.status(),
        }

    async def _acquire(self, request: ops.Acquire, frames: FrameStream) -> Json:
        try:
            sandbox = await self._sandbox(request)
        except SandboxNotFound:  # new, and no config given: the defaults
            sandbox = await self._sandbox(request.model_copy(update={"config": {}}))
        if request.wake:
            async with sandbox.activity():
                pass
        return sandbox.status()

    async def _exec(self, request: ops.Exec, frames: FrameStream) -> Any:
        sandbox = await self._sandbox(request)
        if not request.stream:
            return await sandbox.exec(
                request.command, op_key=request.op_key, timeout=request.timeout
            )
        stream = OutputForwarder(frames)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(stream.forward)
            try:
                return await sandbox.exec(
                    request.command,
                    op_key=request.op_key,
                    timeout=request.timeout,
                    on_output=stream.write,
                )
            finally:
                stream.close()

    async def _exec_status(
        self, request: ops.ExecStatusRequest, frames: FrameStream
    ) -> ops.ExecStatusReply:
        sandbox = await self._sandbox(request)
        status, _ = await sandbox.exec_record(request.op_key)
        return ops.ExecStatusReply(status=status, running=sandbox.exec_running(request.op_key))

    async def _exec_result(
        self, request: ops.ExecResultRequest, frames: FrameStream
    ) -> ops.ExecResultReply:
        sandbox = await self._sandbox(request)
        if request.wait:
            await sandbox.exec_settled(request.op_key)
        _, result = await sandbox.exec_record(request.op_key)
        return ops.ExecResultReply(result=result)

    async def _restart_shell(self, request: ops.RestartShell, frames: FrameStream) -> ops.Empty:
        await (await self._sandbox(request)).restart_shell()
        return ops.Empty()

    async def _stat(self, request: ops.Stat, frames: FrameStream) -> Any:
        return await (await self._sandbox(request)).stat(request.path)

    async def _list_dir(self, request: ops.ListDir, frames: FrameStream) -> Any:
        return await (await self._sandbox(request)).list_dir(request.path)

    async def _read_file(self, request: ops.ReadFile, frames: FrameStream) -> ops.Data:
        sandbox = await self._sandbox(request)
        return ops.Data(data=await sandbox.read_file(request.path, max_bytes=request.max_bytes))

    async def _read_lines(self, request: ops.ReadLines, frames: FrameStream) -> ops.Data:
        sandbox = await self._sandbox(request)
        data = await sandbox.read_lines(
            request.path, request.start, request.end, max_bytes=request.max_bytes
        )
        return ops.Data(data=data)

    async def _write_file(self, request: ops.WriteFile, frames: FrameStream) -> ops.Empty:
        await (await self._sandbox(request)).write_file(request.path, request.data)
        return ops.Empty()

    async def _glob(self, request: ops.Glob, frames: FrameStream) -> Any:
        return await (await self._sandbox(request)).glob(request.pattern, request.path)

    async def _grep(self, request: ops.Grep, frames: FrameStream) -> Any:
        return await (await self._sandbox(request)).grep(request.pattern, request.path)

    # Mount ops work on the host's copy of the tree: they never wake the body.

    async def _put_mount(self, request: ops.PutMount, frames: FrameStream) -> ops.Empty:
        sandbox = await self._sandbox(request)
        async with sandbox.activity(wake=False):
            put = partial(
                sandbox.mounts.put, request.mount, request.files, writable=request.writable
            )
            await _on_mount_tree(sandbox, put, request.mount)
        return ops.Empty()

    async def _list_mount(self, request: ops.ListMount, frames: FrameStream) -> ops.MountListing:
        sandbox = await self._sandbox(request)
        listing = partial(sandbox.mounts.listing, request.mount)
        return await _on_mount_tree(sandbox, listing, request.mount)

    async def _read_mount(self, request: ops.ReadMount, frames: FrameStream) -> ops.Data:
        sandbox = await self._sandbox(request)
        read = partial(sandbox.mounts.read, request.mount, request.path, request.max_bytes)
        return ops.Data(data=await _on_mount_tree(sandbox, read, request.mount))

    async def _put_mount_part(self, request: ops.PutMountPart, frames: FrameStream) -> ops.Empty:
        sandbox = await self._sandbox(request)
        async with sandbox.activity(wake=False):
            put = partial(sandbox.mounts.put_part, request)
            await _on_mount_tree(sandbox, put, request.mount)
        return ops.Empty()

    async def _read_mount_part(
        self, request: ops.ReadMountPart, frames: FrameStream
    ) -> ops.MountPart:
        sandbox = await self._sandbox(request)
        read = partial(
            sandbox.mounts.read_part, request.mount, request.path, request.offset, request.length
        )
        return await _on_mount_tree(sandbox, read, request.mount)

    async def _remove_mount(self, request: ops.RemoveMount, frames: FrameStream) -> ops.Empty:
        sandbox = await self._sandbox(request)
        remove = partial(sandbox.mounts.remove, request.mount, request.paths)
        await _on_mount_tree(sandbox, remove, request.mount)
        return ops.Empty()

    async def _start_process(self, request: ops.StartProcess, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        process = await sandbox.start_process(request.command, name=request.name)
        return process.describe()

    async def _list_processes(
        self, request: ops.ListProcesses, frames: FrameStream
    ) -> ops.ProcessList:
        sandbox = await self._sandbox(request)
        return ops.ProcessList(processes=[p.describe() for p in sandbox.processes.values()])

    async def _read_process(
        self, request: ops.ReadProcess, frames: FrameStream
    ) -> ops.ProcessOutput:
        sandbox = await self._sandbox(request)
        data, start = sandbox.process(request.process_id).ring.read(request.offset)
        return ops.ProcessOutput(data=data, offset=start, end=start + len(data))

    async def _kill_process(self, request: ops.KillProcess, frames: FrameStream) -> ops.Empty:
        sandbox = await self._sandbox(request)
        if request.signal not in signal.valid_signals():
            raise InvalidArgument(f"signal: {request.signal} is not a signal")
        await sandbox.kill_process(request.process_id, request.signal)
        return ops.Empty()

    async def _terminal(self, request: ops.Terminal, frames: FrameStream) -> ops.TerminalEnd:
        sandbox = await self._sandbox(request)
        kind = Kind(request.kind)
        terminal = await sandbox.terminal(
            request.terminal_id,
            kind=kind,
            command=request.command,
            rows=request.rows,
            cols=request.cols,
        )
        if terminal.kind is not kind:
            raise InvalidArgument(f"terminal_id: {terminal.id!r} is a {terminal.kind} terminal")
        return await attach(
            sandbox,
            terminal,
            frames,
            request.offset,
            send_seconds=self._manager.options.terminal_send_seconds,
        )

    async def _snapshot(self, request: ops.Snapshot, frames: FrameStream) -> ops.SnapshotReply:
        sandbox = await self._sandbox(request)
        async with self._manager.saving(sandbox):
            snapshot = await sandbox.snapshot()
        return ops.SnapshotReply(snapshot=codec.encode(snapshot) if snapshot is not None else None)

    async def _sleep(self, request: ops.Sleep, frames: FrameStream) -> ops.Slept:
        sandbox = await self._sandbox(request)
        async with self._manager.saving(sandbox):
            return ops.Slept(slept=await sandbox.sleep(force=request.force))

    async def _destroy(self, request: ops.Destroy, frames: FrameStream) -> ops.Destroyed:
        seconds = await self._manager.destroy(request.sandbox_id, erase=request.erase)
        return ops.Destroyed(destroyed=seconds is not None, active_seconds=seconds or 0.0)

    async def _status(self, request: ops.Status, frames: FrameStream) -> Json:
        if request.sandbox_id is None:
            return self._manager.status()
        return (await self._manager.get(request.sandbox_id)).status()

    async def _set_secrets(self, request: ops.SetSecrets, frames: FrameStream) -> ops.Empty:
        request = request.model_copy(update={"secrets_generation": None})
        sandbox = await self._sandbox(request)
        self._manager.set_secrets(
            sandbox.id, request.generation, request.credentials, request.variables
        )
        return ops.Empty()

    async def _egress_audit(
        self, request: ops.EgressAudit, frames: FrameStream
    ) -> ops.EgressAuditReply:
        sandbox = await self._sandbox(request)
        entries = sandbox.audit.read(request.after, request.limit)
        return ops.EgressAuditReply(
            entries=[
                ops.AuditRecord(**{**asdict(e), "credential_ids": list(e.credential_ids)})
                for e in entries
            ],
            last_seq=sandbox.audit.last_seq,
        )


def _config(value: Json) -> SandboxConfig:
    try:
        config = SandboxConfig.from_json(value)
        egress_policy(config)
    except (TypeError, ValueError, InvalidPolicy) as exc:
        raise InvalidArgument(f"config: {exc}") from None
    return config


def _token_matches(given: str | None, expected: str | None) -> bool:
    if given is None or expected is None:
        return False
    # Compared as bytes, in constant time; "surrogatepass" keeps the encoding
    # one-to-one for a lone surrogate (valid JSON, no UTF-8), which is then
    # just a wrong token.
    return hmac.compare_digest(
        given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass")
    )


class OutputForwarder:
    """Sends a streaming exec's output as ``Output`` frames without ever
    slowing the command: a slow caller loses the oldest buffered output (the
    result still carries the tail), and one that went away loses it all."""

    LIMIT = 1024 * 1024

    def __init__(self, frames: FrameStream) -> None:
        self._frames = frames
        self._buffer = bytearray()
        self._dropped = 0
        self._ready = anyio.Event()
        self._closed = False

    def write(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) > self.LIMIT:
            excess = len(self._buffer) - self.LIMIT
            del self._buffer[:excess]
            self._dropped += excess
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    async def forward(self) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            while True:
                await self._ready.wait()
                self._ready = anyio.Event()
                if self._buffer:
                    data, self._buffer = bytes(self._buffer), bytearray()
                    frame = ops.Output(output=data, dropped=self._dropped)
                    self._dropped = 0
                    await self._frames.send({"output": codec.encode(frame)})
                if self._closed and not self._buffer:
                    return


async def _on_mount_tree(sandbox: HostedSandbox, work: Callable[[], T], shown: str) -> T:
    """Runs ``work`` on the sandbox's mount tree in a worker thread, its disk
    mounted meanwhile (a sleeping sandbox's too); a tree that fills the disk
    is a ``FileError`` on ``shown``."""
    async with sandbox.disk.held():
        try:
            return await to_thread.run_sync(work)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            raise FileError(
                shown, f"no space left on the sandbox's disk ({sandbox.disk.size_mib} MiB)"
            ) from None
