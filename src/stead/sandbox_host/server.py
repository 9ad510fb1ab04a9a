"""The sandbox host daemon: RPC over a Unix socket (0600 in a 0700 directory:
the socket's permissions are the authentication) and, for a remote brain, TCP
with a shared token.

One connection carries one call at a time (``protocol.py``). A call keeps
running when its caller goes away: an exec whose brain was killed finishes and
records its result under its op key, which the restarted brain collects.
"""

from __future__ import annotations

import contextlib
import fcntl
import hmac
import logging
import os
import shutil
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict
from typing import Any

import anyio
from anyio import to_thread
from anyio.abc import ByteStream, TaskStatus

from stead.blobs import open_blob_store
from stead.sandbox import (
    InvalidArgument,
    IsolationUnavailable,
    SandboxConfig,
    SandboxError,
    SandboxNotFound,
    SandboxUnavailable,
)
from stead.sandbox.protocol import (
    PROTOCOL_VERSION,
    FrameStream,
    Json,
    ProtocolError,
    decode_bytes,
    encode_bytes,
    error_frame,
)
from stead.sandbox_host.attach import attach
from stead.sandbox_host.bwrap import install_supervisor
from stead.sandbox_host.catalogue import Catalogue
from stead.sandbox_host.cgroups import detect_cgroups
from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.lifecycle import HostedSandbox
from stead.sandbox_host.manager import Isolation, SandboxManager
from stead.sandbox_host.processes import Kind
from stead.sandbox_host.selfcheck import check_isolation
from stead.sandbox_host.snapshots import remove_stale_staging
from stead.sandbox_host.uids import UidRange, UidRegistry

log = logging.getLogger("stead.sandbox.host")

HELLO_SECONDS = 10.0


class HostAlreadyRunning(Exception):
    """Another sandbox host holds this state directory."""


async def serve_host(
    options: HostOptions, *, task_status: TaskStatus[SandboxManager] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Runs the sandbox host until cancelled; bodies are stopped on the way out."""
    options.state_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(options.state_dir, 0o700)
    with (
        _single_instance(options),
        contextlib.closing(Catalogue.open(options.state_dir / "catalogue.sqlite3")) as catalogue,
    ):
        blobs = open_blob_store(options.blobs)
        span = await catalogue.uid_span()
        isolation, problem = await to_thread.run_sync(_check, options, span)
        cgroups = isolation.cgroups if isolation is not None else None
        async with anyio.create_task_group() as tasks:
            manager = SandboxManager(
                options,
                catalogue=catalogue,
                blobs=blobs,
                isolation=isolation,
                isolation_problem=problem,
                tasks=tasks,
            )
            try:
                await manager.load()
                tasks.start_soon(manager.sleep_idle, name="idle sleeper")
                tasks.start_soon(manager.collect_garbage, name="garbage collector")
                rpc = HostRpc(manager, token=options.token)
                async with _listeners(options) as listeners:
                    for listener, tcp in listeners:
                        tasks.start_soon(_serve_listener, listener, rpc, tcp, tasks)
                    log.info("sandbox host ready on %s", options.socket_path)
                    task_status.started(manager)
                    await anyio.sleep_forever()
            finally:
                await manager.aclose()
                tasks.cancel_scope.cancel()
                if cgroups is not None:
                    cgroups.release()


def _check(
    options: HostOptions, span: tuple[int, int] | None
) -> tuple[Isolation | None, str | None]:
    """The cgroups and uids to use, or why isolation is impossible. ``span``
    is the lowest and highest uid the catalogue's sandboxes have."""
    # Each host's cgroups live under a parent of its own, and its uids in a
    # range of its own, so two hosts on one machine (a test's and an
    # operator's) never sweep each other's sandboxes nor share a uid.
    cgroups = None
    try:
        _prepare_work_dir(options)
        uids = _claim_uids(options, span)
        cgroups = detect_cgroups(parent=f"stead-{options.host_tag}")
        report = check_isolation(options.bwrap, probe_uid=uids.probe_uid, cgroups=cgroups)
        report.raise_if_unusable()
    except IsolationUnavailable as exc:
        if cgroups is not None:
            cgroups.release()
        log.error("sandboxes refused: %s", exc.reason)
        return None, exc.reason
    removed = cgroups.sweep_stale()
    if removed:
        log.info("removed %d stale sandbox cgroups", len(removed))
    return Isolation(cgroups, uids), None


def _claim_uids(options: HostOptions, span: tuple[int, int] | None) -> UidRange:
    """This host's uid range from the machine's registry; a host new to the
    registry whose catalogue has sandboxes asks for the block holding them."""
    registry = UidRegistry(options.uid_registry)
    prefer = span[0] if span is not None else None
    try:
        uids = registry.claim(
            options.state_dir, count=options.uid_count, base=options.uid_base, prefer=prefer
        )
    except OSError as exc:
        raise IsolationUnavailable(
            f"cannot claim sandbox uids in {registry.path} ({exc}): "
            "set STEAD_SANDBOX_UID_REGISTRY to a file root may write"
        ) from None
    log.info("sandbox uids %d-%d (registry %s)", uids.base, uids.last, registry.path)
    if span is not None and not (span[0] in uids and span[1] in uids):
        # Sandboxes made before this range was claimed keep their uids, so
        # that they still own their files.
        log.warning(
            "sandboxes of this host have uids %d-%d, outside its range %d-%d",
            *span,
            uids.base,
            uids.last,
        )
    return uids


def _prepare_work_dir(options: HostOptions) -> None:
    """Makes the work directory and puts the supervisor's code in it; refuses
    one that sandbox uids could not reach."""
    work = options.work_dir
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o711)
    for parent in [work, *work.parents]:
        if not parent.stat().st_mode & 0o001:
            raise IsolationUnavailable(
                f"the sandbox work directory {work} is not reachable by sandbox users: "
                f"{parent} is not searchable by others (chmod o+x {parent}, or set "
                "STEAD_SANDBOX_WORK_DIR to a directory under /var/lib)"
            )
    lib = work / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    lib.mkdir(mode=0o755)
    install_supervisor(lib)
    for name in ("sandboxes", "packages"):
        (work / name).mkdir(exist_ok=True)
        os.chmod(work / name, 0o711)
    # No restore runs before this host serves: any staging tree is a killed
    # host's, and would otherwise stay on disk for the sandbox's lifetime.
    stale = sum(remove_stale_staging(sandbox) for sandbox in (work / "sandboxes").iterdir())
    if stale:
        log.info("removed %d restores left unfinished by an earlier host", stale)


@contextlib.contextmanager
def _single_instance(options: HostOptions) -> Any:
    path = options.state_dir / "host.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HostAlreadyRunning(
                f"another sandbox host is running on {options.state_dir}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


@contextlib.asynccontextmanager
async def _listeners(options: HostOptions) -> AsyncIterator[list[tuple[Any, bool]]]:
    path = options.socket_path
    path.unlink(missing_ok=True)  # left by a host that died; we hold the lock now
    old_umask = os.umask(0o177)
    try:
        unix = await anyio.create_unix_listener(path)
    finally:
        os.umask(old_umask)
    listeners: list[tuple[Any, bool]] = [(unix, False)]
    try:
        if options.listen_tcp:
            if not options.token:
                raise ValueError("a TCP listener needs a token")
            host, _, port = options.listen_tcp.rpartition(":")
            tcp = await anyio.create_tcp_listener(
                local_host=host or "127.0.0.1", local_port=int(port)
            )
            listeners.append((tcp, True))
        yield listeners
    finally:
        with anyio.CancelScope(shield=True):
            for listener, _ in listeners:
                await listener.aclose()
        path.unlink(missing_ok=True)


async def _serve_listener(listener: Any, rpc: HostRpc, tcp: bool, tasks: Any) -> None:
    async def handle(stream: ByteStream) -> None:
        await rpc.serve_connection(FrameStream(stream), needs_hello=tcp)

    await listener.serve(handle, task_group=tasks)


# -- the calls ---------------------------------------------------------------------


class HostRpc:
    def __init__(self, manager: SandboxManager, *, token: str | None) -> None:
        self._manager = manager
        self._token = token
        self._ops: dict[str, Callable[[Json, FrameStream], Awaitable[Json]]] = {
            "ping": self._ping,
            "acquire": self._acquire,
            "exec": self._exec,
            "exec_status": self._exec_status,
            "exec_result": self._exec_result,
            "restart_shell": self._restart_shell,
            "stat": self._stat,
            "list_dir": self._list_dir,
            "read_file": self._read_file,
            "read_lines": self._read_lines,
            "write_file": self._write_file,
            "glob": self._glob,
            "grep": self._grep,
            "start_process": self._start_process,
            "list_processes": self._list_processes,
            "read_process": self._read_process,
            "kill_process": self._kill_process,
            "snapshot": self._snapshot,
            "sleep": self._sleep,
            "destroy": self._destroy,
            "status": self._status,
            "terminal": self._terminal,
        }

    async def serve_connection(self, frames: FrameStream, *, needs_hello: bool) -> None:
        try:
            if needs_hello and not await self._hello(frames):
                return
            while True:
                try:
                    request = await frames.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    return
                reply = await self.call(request, frames)
                if request.get("op") == "terminal":
                    # A stalled client gets no more than a bounded wait; and it
                    # may still be sending input, so its connection ends here.
                    with anyio.move_on_after(self._manager.options.terminal_send_seconds):
                        await frames.send(reply)
                    return
                await frames.send(reply)
        except ProtocolError as exc:
            with contextlib.suppress(Exception):
                await frames.send({"error": "InvalidArgument", "message": str(exc)})
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # the caller went away; what it started has finished or goes on
        finally:
            with contextlib.suppress(Exception):
                await frames.aclose()

    async def _hello(self, frames: FrameStream) -> bool:
        with anyio.move_on_after(HELLO_SECONDS):
            hello = await frames.receive()
            token = hello.get("token")
            if (
                hello.get("op") == "hello"
                and isinstance(token, str)
                and self._token is not None
                and hmac.compare_digest(token.encode(), self._token.encode())
            ):
                await frames.send({"result": {"version": PROTOCOL_VERSION}})
                return True
            await frames.send({"error": "InvalidArgument", "message": "bad or missing token"})
        return False

    async def call(self, request: Json, frames: FrameStream) -> Json:
        op = request.get("op")
        handler = self._ops.get(op) if isinstance(op, str) else None
        try:
            if handler is None:
                raise InvalidArgument(f"op: unknown operation {op!r}")
            return {"result": await handler(request, frames)}
        except SandboxError as exc:
            return error_frame(exc)
        except ProtocolError as exc:
            return error_frame(InvalidArgument(str(exc)))
        except Exception as exc:
            log.exception("sandbox host call %s failed", op)
            return error_frame(SandboxUnavailable(f"the sandbox host failed: {exc}"))

    async def _sandbox(self, request: Json) -> HostedSandbox:
        sandbox_id = request.get("sandbox_id")
        config = request.get("config")
        if config is None:
            return await self._manager.get(sandbox_id)  # type: ignore[arg-type]
        try:
            parsed = SandboxConfig.from_json(config)
        except (TypeError, ValueError) as exc:
            raise InvalidArgument(f"config: {exc}") from None
        return await self._manager.acquire(sandbox_id, parsed)  # type: ignore[arg-type]

    async def _ping(self, request: Json, frames: FrameStream) -> Json:
        return {"version": PROTOCOL_VERSION, "pid": os.getpid(), **self._manager.status()}

    async def _acquire(self, request: Json, frames: FrameStream) -> Json:
        try:
            sandbox = await self._sandbox(request)
        except SandboxNotFound:  # new, and no config given: the defaults
            sandbox = await self._sandbox({**request, "config": {}})
        if request.get("wake", False):
            async with sandbox.activity():
                pass
        return sandbox.status()

    async def _exec(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        command, op_key = _str(request, "command"), _str(request, "op_key")
        timeout = _number(request, "timeout")
        if not request.get("stream"):
            return asdict(await sandbox.exec(command, op_key=op_key, timeout=timeout))
        stream = OutputForwarder(frames)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(stream.forward)
            try:
                result = await sandbox.exec(
                    command, op_key=op_key, timeout=timeout, on_output=stream.write
                )
            finally:
                stream.close()
        return asdict(result)

    async def _exec_status(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        op_key = _str(request, "op_key")
        status, _ = await sandbox.exec_record(op_key)
        return {"status": status.value, "running": sandbox.exec_running(op_key)}

    async def _exec_result(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        op_key = _str(request, "op_key")
        if request.get("wait"):
            await sandbox.exec_settled(op_key)
        _, result = await sandbox.exec_record(op_key)
        return {"result": asdict(result) if result is not None else None}

    async def _restart_shell(self, request: Json, frames: FrameStream) -> Json:
        await (await self._sandbox(request)).restart_shell()
        return {}

    async def _stat(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        return asdict(await sandbox.stat(_str(request, "path")))

    async def _list_dir(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        return asdict(await sandbox.list_dir(_str(request, "path")))

    async def _read_file(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        data = await sandbox.read_file(_str(request, "path"), max_bytes=_int(request, "max_bytes"))
        return {"data_b64": encode_bytes(data)}

    async def _read_lines(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        data = await sandbox.read_lines(
            _str(request, "path"),
            _int(request, "start"),
            _int(request, "end"),
            max_bytes=_int(request, "max_bytes"),
        )
        return {"data_b64": encode_bytes(data)}

    async def _write_file(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        await sandbox.write_file(_str(request, "path"), decode_bytes(request.get("data_b64")))
        return {}

    async def _glob(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        return asdict(await sandbox.glob(_str(request, "pattern"), _opt_str(request, "path")))

    async def _grep(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        return asdict(await sandbox.grep(_str(request, "pattern"), _opt_str(request, "path")))

    async def _start_process(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        process = await sandbox.start_process(
            _str(request, "command"), name=_opt_str(request, "name")
        )
        return process.describe()

    async def _list_processes(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        return {"processes": [p.describe() for p in sandbox.processes.values()]}

    async def _read_process(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        process = sandbox.process(_str(request, "process_id"))
        data, start = process.ring.read(_int(request, "offset", 0))
        return {"data_b64": encode_bytes(data), "offset": start, "end": start + len(data)}

    async def _kill_process(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        signum = _int(request, "signal", int(signal.SIGKILL))
        if signum not in signal.valid_signals():
            raise InvalidArgument(f"signal: {signum} is not a signal")
        await sandbox.kill_process(_str(request, "process_id"), signum)
        return {}

    async def _terminal(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        try:
            kind = Kind(request.get("kind", "pty"))
        except ValueError:
            raise InvalidArgument("kind: expected 'pty' or 'exec'") from None
        if kind is Kind.BACKGROUND:
            raise InvalidArgument("kind: expected 'pty' or 'exec'")
        terminal = await sandbox.terminal(
            _str(request, "terminal_id"),
            kind=kind,
            command=_opt_str(request, "command"),
            rows=_int(request, "rows", 24),
            cols=_int(request, "cols", 80),
        )
        if terminal.kind is not kind:
            raise InvalidArgument(f"terminal_id: {terminal.id!r} is a {terminal.kind} terminal")
        return await attach(
            sandbox,
            terminal,
            frames,
            _int(request, "offset", 0),
            send_seconds=self._manager.options.terminal_send_seconds,
        )

    async def _snapshot(self, request: Json, frames: FrameStream) -> Json:
        snapshot = await (await self._sandbox(request)).snapshot()
        return {"snapshot": asdict(snapshot) if snapshot is not None else None}

    async def _sleep(self, request: Json, frames: FrameStream) -> Json:
        sandbox = await self._sandbox(request)
        return {"slept": await sandbox.sleep(force=bool(request.get("force", True)))}

    async def _destroy(self, request: Json, frames: FrameStream) -> Json:
        seconds = await self._manager.destroy(_str(request, "sandbox_id"))
        return {"destroyed": seconds is not None, "active_seconds": seconds or 0.0}

    async def _status(self, request: Json, frames: FrameStream) -> Json:
        if request.get("sandbox_id") is None:
            return self._manager.status()
        return (await self._manager.get(_str(request, "sandbox_id"))).status()


class OutputForwarder:
    """Sends a streaming exec's output as ``output`` frames without ever
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
                    frame: Json = {"output_b64": encode_bytes(data)}
                    if self._dropped:
                        frame["dropped"], self._dropped = self._dropped, 0
                    await self._frames.send(frame)
                if self._closed and not self._buffer:
                    return


def _str(request: Json, name: str) -> str:
    value = request.get(name)
    if not isinstance(value, str):
        raise InvalidArgument(f"{name}: expected a string")
    return value


def _opt_str(request: Json, name: str) -> str | None:
    return None if request.get(name) is None else _str(request, name)


def _int(request: Json, name: str, default: int | None = None) -> int:
    value = request.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name}: expected an integer")
    return value


def _number(request: Json, name: str) -> float:
    value = request.get(name)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidArgument(f"{name}: expected a number")
    return float(value)
