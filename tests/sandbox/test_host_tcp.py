"""The sandbox host's TCP listener faces anyone who can reach its port: what
such a caller sends before its token is checked must cost the host little,
and the host must answer it, stay up and go on serving the brains that hold
the token. What crosses the network is TLS keyed by the token: neither the
token nor a call can be read off the wire."""

from __future__ import annotations

import ssl
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from anyio.abc import SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener
from anyio.streams.tls import TLSStream

from stead.sandbox import HostClient, HostUnreachable, VersionMismatch, ops, parse_address
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
    """A connection that has not said hello, over TLS with no check of the
    host's certificate: anyone can get this far without the token."""
    host, _, port = tcp_host.rpartition(":")
    anyone = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    anyone.check_hostname, anyone.verify_mode = False, ssl.CERT_NONE
    stream = await anyio.connect_tcp(host, int(port))
    tls = await TLSStream.wrap(
        stream, server_side=False, ssl_context=anyone, standard_compatible=False
    )
    frames = FrameStream(tls)
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


async def test_neither_the_token_nor_a_call_crosses_the_network_readable(tcp_host: str) -> None:
    """Before, the hello carried the token, and the secrets operation a
    sandbox's credentials, in plain TCP to a host on another machine."""
    secret = "sandbox-abcdef-not-on-the-wire"
    seen = bytearray()
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tasks,
    ):
        relay = _recording_relay(listener, tcp_host, seen, tasks)
        client = HostClient(parse_address(f"tcp://{relay}", TOKEN))
        try:
            assert (await client.ping())["version"]
            assert await client.sandbox_status(secret) is None
        finally:
            await client.aclose()
        tasks.cancel_scope.cancel()
    assert seen[0] == 0x16  # a TLS handshake record
    assert TOKEN.encode() not in seen and secret.encode() not in seen


async def test_a_brain_with_another_token_is_told_so_and_the_host_stays_up(
    tcp_host: str,
) -> None:
    client = HostClient(parse_address(f"tcp://{tcp_host}", "another-token-of-16-chars"))
    try:
        with pytest.raises(HostUnreachable, match="holds another token"):
            await client.ping()
    finally:
        await client.aclose()
    await still_serves(tcp_host)


async def test_a_brain_of_an_older_stead_is_told_which_versions(tcp_host: str) -> None:
    """A brain from before TLS sends its hello in plain frames: it is answered
    in one, naming both, as any brain of another version is."""
    host, _, port = tcp_host.rpartition(":")
    frames = FrameStream(await anyio.connect_tcp(host, int(port)))
    try:
        await frames.send({"op": "hello", "version": 8, "token": TOKEN})
        with anyio.fail_after(WAIT):
            answer = await frames.receive()
    finally:
        await frames.aclose()
    assert answer["error"] == VersionMismatch.__name__
    assert f"version {ops.PROTOCOL_VERSION}, over TLS" in answer["message"]
    assert "version 8, in plain TCP" in answer["message"]
    assert TOKEN not in answer["message"]
    await still_serves(tcp_host)


def _recording_relay(
    listener: MultiListener[SocketStream], target: str, seen: bytearray, tasks: TaskGroup
) -> str:
    """``listener`` passing each connection on to ``target``, keeping every byte
    either way in ``seen``; its ``host:port``."""
    host, _, port = target.rpartition(":")

    async def pump(source: SocketStream, sink: SocketStream) -> None:
        async for chunk in source:
            seen.extend(chunk)
            await sink.send(chunk)

    async def relay(client: SocketStream) -> None:
        async with (
            client,
            await anyio.connect_tcp(host, int(port)) as upstream,
            anyio.create_task_group() as both,
        ):
            both.start_soon(pump, client, upstream)
            both.start_soon(pump, upstream, client)

    tasks.start_soon(listener.serve, relay)
    return f"127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}"
