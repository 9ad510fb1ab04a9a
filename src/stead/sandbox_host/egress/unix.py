"""The proxy's Unix socket: a listener and a byte stream over raw non-blocking sockets.

anyio 4.16's asyncio ``UNIXSocketStream`` and ``UNIXSocketListener`` resolve their
wait future straight from the selector callback, so a read cancelled in the same
loop iteration in which its socket turns readable makes the loop report
``InvalidStateError`` from ``Future.set_result``. A splice cancels reads all the
time (idle timeout, the other direction ending, the proxy closing), so these wait
with ``anyio.wait_readable``/``wait_writable``, which tolerate that race, and do
the I/O on the socket itself. TCP streams go through transports and are unaffected.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import anyio
from anyio.abc import ByteStream
from anyio.lowlevel import checkpoint

CHUNK = 64 * 1024


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


async def accept(listener: socket.socket) -> UnixStream:
    """The next connection on ``listener``; ``OSError`` (EMFILE ...) passes through."""
    await checkpoint()
    while True:
        try:
            client, _ = listener.accept()
        except BlockingIOError:
            await anyio.wait_readable(listener)
            continue
        return UnixStream(client)


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
