"""Unix sockets as anyio byte streams over raw non-blocking sockets: the host
protocol's socket (the brain dials it, the host listens on it) and each
sandbox's egress proxy socket.

anyio 4.16's asyncio ``UNIXSocketStream`` and ``UNIXSocketListener`` resolve their
wait future straight from the selector callback, so a read cancelled in the same
loop iteration in which its socket turns readable makes the loop report
``InvalidStateError`` from ``Future.set_result``, a traceback in the log. Reads
are cancelled all the time (a splice's idle timeout or other direction ending, a
terminal's relay when the server stops, a call's timeout), so these wait with
``anyio.wait_readable``/``wait_writable``, which tolerate that race, and do the
I/O on the socket itself. TCP streams go through transports and are unaffected.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import ByteStream, Listener, SocketAttribute, TaskGroup
from anyio.lowlevel import checkpoint

log = logging.getLogger("stead.sandbox.unix")

CHUNK = 64 * 1024
ACCEPT_BACKOFF_SECONDS = 0.1
"""A failed accept (no descriptor left, say) is tried again after this long."""


async def connect_unix(path: Path) -> UnixStream:
    """A stream connected to the listener at ``path``; ``OSError`` if none answers."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        try:
            sock.connect(os.fspath(path))
        except BlockingIOError:  # the listener's backlog is full: wait for room
            await anyio.wait_writable(sock)
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if error:
                raise OSError(error, os.strerror(error), os.fspath(path)) from None
    except BaseException:
        sock.close()
        raise
    return UnixStream(sock)


def listen_unix(path: Path, *, mode: int, backlog: int) -> socket.socket:
    """A non-blocking listening socket bound at ``path`` with permissions ``mode``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(os.fspath(path))
        os.chmod(path, mode)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def _accept(listener: socket.socket) -> UnixStream:
    """The next connection on ``listener``; ``OSError`` (EMFILE ...) passes through."""
    await checkpoint()
    while True:
        try:
            client, _ = listener.accept()
        except BlockingIOError:
            await anyio.wait_readable(listener)
            continue
        return UnixStream(client)


async def next_connection(listener: socket.socket) -> UnixStream:
    """The next connection on ``listener``, through failures: an accept that
    fails (EMFILE: no descriptor left) is logged and tried again after
    ``ACCEPT_BACKOFF_SECONDS``, as the listener outlives it.
    ``anyio.ClosedResourceError`` once the listener is closed."""
    while True:
        try:
            return await _accept(listener)
        except OSError as exc:
            log.warning("unix socket %s: accept failed: %s", listener.getsockname(), exc)
            await anyio.sleep(ACCEPT_BACKOFF_SECONDS)


def close_listener(listener: socket.socket) -> None:
    """Closes ``listener``, waking a task waiting to accept on it."""
    if listener.fileno() >= 0:
        anyio.notify_closing(listener)
    listener.close()


class UnixStream(ByteStream):
    """A connected Unix stream socket as an anyio ``ByteStream``; owns the socket."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self._sock = sock

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        # The raw socket, as anyio's own streams give it (the host client peeks
        # at an idle connection through it).
        return {
            SocketAttribute.raw_socket: lambda: self._sock,
            SocketAttribute.family: lambda: self._sock.family,
        }

    async def receive(self, max_bytes: int = CHUNK) -> bytes:
        await checkpoint()
        while True:
            try:
                data = self._live().recv(max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            if not data:
                raise anyio.EndOfStream
            return data

    async def send(self, item: bytes) -> None:
        await checkpoint()
        view = memoryview(item)
        while view:
            try:
                sent = self._live().send(view)
            except BlockingIOError:
                await anyio.wait_writable(self._sock)
                continue
            except OSError as exc:
                raise anyio.BrokenResourceError from exc
            view = view[sent:]

    async def send_eof(self) -> None:
        await checkpoint()
        try:
            self._live().shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        if self._sock.fileno() >= 0:
            anyio.notify_closing(self._sock)
            self._sock.close()
        await checkpoint()

    def _live(self) -> socket.socket:
        if self._sock.fileno() < 0:
            raise anyio.ClosedResourceError
        return self._sock


class UnixListener(Listener[UnixStream]):
    """``listen_unix``'s socket as an anyio listener; owns the socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    async def serve(
        self,
        handler: Callable[[UnixStream], Any],
        task_group: TaskGroup | None = None,
    ) -> None:
        """Hands each connection to ``handler`` in ``task_group`` (one of its
        own if None) until the listener is closed."""
        async with contextlib.AsyncExitStack() as stack:
            if task_group is None:
                task_group = await stack.enter_async_context(anyio.create_task_group())
            while True:
                try:
                    stream = await next_connection(self._sock)
                except anyio.ClosedResourceError:
                    return
                task_group.start_soon(handler, stream)

    async def aclose(self) -> None:
        close_listener(self._sock)
        await checkpoint()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return {SocketAttribute.raw_socket: lambda: self._sock}
