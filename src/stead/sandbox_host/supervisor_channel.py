"""The host's side of the channel to a sandbox's supervisor (``inside/init.py``),
and the fds it hands back as byte streams.

Requests go ``marshal``-encoded (built into the interpreter, so the supervisor
starts without importing ``json``) over one SOCK_SEQPACKET socket; what comes
back is JSON, parsed here as untrusted input, with at most ``MAX_FDS`` fds a
message.
"""

from __future__ import annotations

import array
import json
import logging
import marshal
import os
import signal
import socket
from collections.abc import Callable
from typing import Any, TypeGuard

import anyio

from stead.sandbox import SandboxUnavailable

log = logging.getLogger(__name__)

CALL_SECONDS = 10.0
MAX_MESSAGE = 1 << 20
MAX_FDS = 4
MARSHAL_VERSION = 4


class SupervisorChannel:
    """Requests to the supervisor and its events, over one SOCK_SEQPACKET socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._next_id = 0
        self._replies: dict[int, tuple[anyio.Event, list[Any]]] = {}
        self._running: set[int] = set()
        """Pids the supervisor said it spawned and has not reported gone."""
        self._exits: dict[int, int] = {}
        self._exit_events: dict[int, anyio.Event] = {}
        self._exit_hooks: dict[int, Callable[[], None]] = {}
        self.ready = anyio.Event()
        self.closed = anyio.Event()

    async def request(self, message: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
        self._next_id += 1
        ident = self._next_id
        waiter = anyio.Event()
        slot: list[Any] = []
        self._replies[ident] = (waiter, slot)
        try:
            await self._send(message | {"id": ident})
            with anyio.fail_after(CALL_SECONDS):
                await first_of(waiter.wait, self.closed.wait)
        except TimeoutError:
            raise SandboxUnavailable("the sandbox did not answer") from None
        finally:
            self._replies.pop(ident, None)
        if not slot:
            raise SandboxUnavailable("the sandbox stopped")
        reply, fds = slot[0], slot[1]
        if "error" in reply:
            for fd in fds:
                os.close(fd)
            raise SandboxUnavailable(f"the sandbox refused: {reply['error']}")
        return reply, fds

    async def wait_exit(self, pid: int) -> int | None:
        """The child's exit code (negative: killed by that signal); None if the
        sandbox stopped first."""
        if pid in self._exits:
            return self._exits[pid]
        event = self._exit_events.setdefault(pid, anyio.Event())
        await first_of(event.wait, self.closed.wait)
        return self._exits.get(pid)

    def on_exit(self, pid: int, hook: Callable[[], None]) -> None:
        """Calls ``hook`` once the child has exited or the sandbox stopped (at
        once if so already), from the channel's reader: it must not block nor
        raise. One per pid, for the child's whole life."""
        if pid in self._exits or self.closed.is_set():
            hook()
        else:
            self._exit_hooks[pid] = hook

    def exit_code(self, pid: int) -> int | None:
        return self._exits.get(pid)

    async def _send(self, message: dict[str, Any]) -> None:
        data = marshal.dumps(_plain(message), MARSHAL_VERSION)
        while True:
            try:
                self._sock.send(data)
                return
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
            except OSError as exc:
                raise SandboxUnavailable(f"the sandbox is gone: {exc.strerror}") from None

    async def read_forever(self) -> None:
        try:
            while True:
                try:
                    data, ancdata, _, _ = self._sock.recvmsg(
                        MAX_MESSAGE, socket.CMSG_SPACE(MAX_FDS * 4)
                    )
                except BlockingIOError:
                    await anyio.wait_readable(self._sock)
                    continue
                except OSError:
                    return
                if not data:
                    return
                self._dispatch(data, _fds_from(ancdata))
        finally:
            self.closed.set()
            for event in self._exit_events.values():
                event.set()
            hooks, self._exit_hooks = self._exit_hooks, {}
            for hook in hooks.values():
                hook()

    def _dispatch(self, data: bytes, fds: list[int]) -> None:
        # The supervisor runs as the sandbox user, which may have taken it over:
        # treat what it says as untrusted input.
        try:
            message = json.loads(data)
            if not isinstance(message, dict):
                raise ValueError
        except (ValueError, RecursionError):  # "[[[[..." nested past the C stack limit
            message = {}
        event = message.get("event")
        if event == "ready":
            self.ready.set()
        elif event == "exit" and _is_int(pid := message.get("pid")) and pid in self._running:
            # Only a pid it spawned: exits made up for others would grow
            # _exits without bound.
            code = message.get("code")
            self._running.discard(pid)
            self._exits[pid] = code if isinstance(code, int) else -signal.SIGKILL
            if (waiter := self._exit_events.pop(pid, None)) is not None:
                waiter.set()
            if (hook := self._exit_hooks.pop(pid, None)) is not None:
                hook()
        elif isinstance(ident := message.get("id"), int) and ident in self._replies:
            if _is_int(pid := message.get("pid")) and "error" not in message:
                # A pid the sandbox reuses after many processes starts afresh:
                # the exit recorded for its previous holder is not this one's.
                self._exits.pop(pid, None)
                self._running.add(pid)
            waiter, slot = self._replies[ident]
            slot += [message, fds]
            waiter.set()
            return
        for fd in fds:
            os.close(fd)


class FdStream:
    """One non-blocking pipe or PTY fd as an async byte stream."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self.fd: int | None = fd

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            if self.fd is None:
                raise anyio.ClosedResourceError
            try:
                data = os.read(self.fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self.fd)
                continue
            except OSError:  # EIO: a PTY whose last child closed it
                raise anyio.EndOfStream from None
            if not data:
                raise anyio.EndOfStream
            return data

    async def send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.fd is None:
                raise anyio.ClosedResourceError
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
            except OSError:
                raise anyio.BrokenResourceError from None

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            anyio.notify_closing(fd)
            os.close(fd)


def _fds_from(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            fds.extend(array.array("i", data[:usable]))
    return fds


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _plain(value: object) -> Any:
    """``value`` with builtin types only, which is all marshal takes (an IntEnum
    signal number is an int here); refuses, as JSON would, anything else."""
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        plain = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"keys must be str, not {type(key).__name__}")
            plain[str(key)] = _plain(item)
        return plain
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


async def first_of(*waits: Any) -> None:
    """Returns when the first of the given async callables returns."""
    async with anyio.create_task_group() as tasks:

        async def run(wait: Any) -> None:
            await wait()
            tasks.cancel_scope.cancel()

        for wait in waits:
            tasks.start_soon(run, wait)
