"""The sandbox host's TCP listener faces anyone who can reach its port: what
such a caller sends before its token is checked must cost the host little,
and the host must answer it, stay up and go on serving the brains that hold
the token."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from stead.sandbox import HostClient, ops, parse_address
from stead.sandbox.protocol import MAX_FRAME, FrameStream
from stead.sandbox_host.config import advertised
from stead.testing import HostProcess, ServeForker, free_port
from tests.sandbox.conftest import WAIT, requires_isolation

pytestmark = [pytest.mark.anyio, requires_isolation]
TOKEN = "tcp-listener-token"


@pytest.fixture(scope="module")
def tcp_host(tmp_path_factory: pytest.TempPathFactory, forker: ServeForker) -> Iterator[str]:
    """A host listening on a loopback port; its ``host:port``."""
    root: Path = tmp_path_factory.mktemp("tcp-host")
    listen = f"127.0.0.1:{free_port()}"
    env = {"STEAD_SANDBOX_HOST_LISTEN_TCP": listen, "STEAD_SANDBOX_HOST_TOKEN": TOKEN}
    process = HostProcess(root / "state", env=env, forker=forker).start()
    yield listen
    process.stop()
    assert TOKEN not in process.log_path.read_text()


@pytest.fixture
async def stranger(tcp_host: str) -> AsyncIterator[FrameStream]:
    """A connection that has not said hello."""
    host, _, port = tcp_host.rpartition(":")
    frames = FrameStream(await anyio.connect_tcp(host, int(port)))
    yield frames
    await frames.aclose()


async def still_serves(tcp_host: str) -> None:
    client = HostClient(parse_address(f"tcp://{tcp_host}", TOKEN))
    try:
        assert (await client.ping())["version"]
    finally:
        await client.aclose()


async def test_a_huge_first_frame_is_refused_before_it_is_read(
    tcp_host: str, stranger: FrameStream
) -> None:
    """Before, the host read up to 64 MiB of a stranger's first frame before
    looking at it: eight such connections grew it by 500 MB."""
    await stranger.stream.send(struct.pack(">I", MAX_FRAME))  # and never the frame
    with anyio.fail_after(WAIT):
        answer = await stranger.receive()
    assert answer["error"] == "InvalidArgument"
    assert "too large" in answer["message"]
    await still_serves(tcp_host)


async def test_a_token_that_is_not_text_is_refused_as_a_wrong_one(
    tcp_host: str, stranger: FrameStream
) -> None:
    """A lone surrogate is valid JSON but no UTF-8: before, comparing it broke
    the connection without an answer and logged a traceback."""
    hello = {"op": "hello", "version": ops.PROTOCOL_VERSION, "token": "\ud800"}
    await stranger.send(hello)
    with anyio.fail_after(WAIT):
        answer = await stranger.receive()
    assert answer == {"error": "InvalidArgument", "message": "token: bad or missing token"}
    await still_serves(tcp_host)


async def test_an_ipv6_address_is_written_in_brackets(tmp_path: Path, forker: ServeForker) -> None:
    """``[::1]:port``, as URLs write IPv6 (and the wildcard ``[::]``): before,
    the host could not listen on it ("Name or service not known") nor a brain
    dial ``tcp://[::1]:port``."""
    listen = f"[::1]:{free_port()}"
    env = {"STEAD_SANDBOX_HOST_LISTEN_TCP": listen, "STEAD_SANDBOX_HOST_TOKEN": TOKEN}
    process = HostProcess(tmp_path / "state", env=env, forker=forker).start()
    try:
        assert process.call({"op": "ping"})["result"]["address"] == f"tcp://{listen}"
        await still_serves(listen)
    finally:
        process.stop()
    assert advertised("[::]:7070") is None
