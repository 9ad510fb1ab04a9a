"""The host protocol's Unix socket on uvloop, as ``stead serve`` and ``stead
sandbox-host`` run it: a read cancelled in the loop iteration its socket turns
readable (a terminal's relay when the server stops, a call's timeout) leaves no
``InvalidStateError`` traceback in the log. anyio's own Unix streams resolve
their wait future from the selector callback and reported one on every such
read (``stead.sandbox.unix``)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteStream

from stead.sandbox import HostAddress, HostClient
from stead.sandbox.unix import UnixListener, UnixStream, connect_unix, listen_unix

pytestmark = pytest.mark.anyio
ROUNDS = 20


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return ("asyncio", {"use_uvloop": True})


def loop_errors() -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: errors.append(context))
    return errors


async def cancel_at_readiness(stream: ByteStream, peer: socket.socket) -> None:
    """Starts a read of ``stream``, then makes it readable and cancels the read
    in the same loop iteration."""
    scope = anyio.CancelScope()

    async def reader() -> None:
        with scope:
            await stream.receive()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(reader)
        await anyio.sleep(0.01)  # the read is waiting
        peer.send(b"x")
        scope.cancel()


async def test_the_brains_end_cancels_reads_without_a_loop_error(tmp_path: Path) -> None:
    errors = loop_errors()
    path = tmp_path / "host.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(ROUNDS)
        for _ in range(ROUNDS):
            stream = await connect_unix(path)
            peer, _ = server.accept()
            with peer:
                await cancel_at_readiness(stream, peer)
                await stream.aclose()
        await anyio.sleep(0.05)
    assert errors == []


async def test_the_hosts_end_cancels_reads_without_a_loop_error(tmp_path: Path) -> None:
    errors = loop_errors()
    path = tmp_path / "host.sock"
    listener = UnixListener(listen_unix(path, mode=0o600, backlog=ROUNDS))
    accepted: list[UnixStream] = []
    arrived = anyio.Event()

    async def handle(stream: UnixStream) -> None:
        accepted.append(stream)
        arrived.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, handle, tasks)
        for _ in range(ROUNDS):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:
                peer.connect(str(path))
                with anyio.fail_after(10):
                    await arrived.wait()
                arrived = anyio.Event()
                await cancel_at_readiness(accepted[-1], peer)
                await accepted[-1].aclose()
        await listener.aclose()
    await anyio.sleep(0.05)
    assert path.stat().st_mode & 0o777 == 0o600
    assert errors == []


async def test_the_host_client_dials_a_unix_socket_with_the_stead_stream(tmp_path: Path) -> None:
    path = tmp_path / "host.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(1)
        client = HostClient(HostAddress(unix_path=path))
        stream = await client._connect()
        try:
            assert isinstance(stream, UnixStream)
        finally:
            await stream.aclose()
