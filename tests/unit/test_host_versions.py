"""A brain and a sandbox host of different stead versions refuse each other
over TCP with a message naming both versions, as they do on the Unix socket.

A host from before the TCP transport became TLS (host protocol 8 and older)
reads frames in plain TCP: it takes a TLS handshake for a frame too large and
answers in a plain frame the brain's TLS cannot read. The brain must still
learn that it is a host of another version, not a host that is away: a host
away is one whose sandboxes a turn moves to its own host, with only their
last snapshot, and an older host during a rolling upgrade is alive and holds
them."""

from __future__ import annotations

import json
import struct
from collections.abc import AsyncIterator

import anyio
import pytest
from anyio.abc import SocketStream

from stead.sandbox import HostClient, HostUnreachable, VersionMismatch, ops, parse_address
from stead.sandbox.protocol import MAX_FRAME

pytestmark = pytest.mark.anyio
TOKEN = "a-token-of-more-than-16-characters"
OLDER = 8


async def _older_host_answer(
    stream: SocketStream, heard: list[dict[str, object]]
) -> dict[str, object] | None:
    """What a host of protocol ``OLDER`` answers the first frame on a connection."""
    try:
        head = await stream.receive(4)
        while len(head) < 4:
            head += await stream.receive(4 - len(head))
        (length,) = struct.unpack(">I", head)
        if length > MAX_FRAME:
            message = f"frame of {length} bytes is too large"
            return {"error": "InvalidArgument", "message": message}
        body = b""
        while len(body) < length:
            body += await stream.receive(length - len(body))
    except anyio.EndOfStream:
        return None
    hello = json.loads(body)
    heard.append(hello)
    if hello.get("version") != OLDER:
        message = (
            f"the brain speaks host protocol version {hello.get('version')} and this "
            f"sandbox host version {OLDER}: run the same stead version on both"
        )
        return {"error": "VersionMismatch", "message": message}
    return {"result": {"version": OLDER}}


@pytest.fixture
async def older_host() -> AsyncIterator[tuple[str, list[dict[str, object]]]]:
    """A host of a stead from before TLS listening on loopback: its ``host:port``
    and the hellos it heard."""
    heard: list[dict[str, object]] = []

    async def serve(stream: SocketStream) -> None:
        async with stream:
            answer = await _older_host_answer(stream, heard)
            if answer is not None:
                data = json.dumps(answer).encode()
                await stream.send(struct.pack(">I", len(data)) + data)

    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(listener.serve, serve)
        yield f"127.0.0.1:{listener.extra(anyio.abc.SocketAttribute.local_port)}", heard
        tasks.cancel_scope.cancel()


async def test_a_host_of_an_older_stead_is_a_version_mismatch_naming_both(
    older_host: tuple[str, list[dict[str, object]]],
) -> None:
    address, heard = older_host
    client = HostClient(parse_address(f"tcp://{address}", TOKEN))
    try:
        with pytest.raises(VersionMismatch) as refused:
            await client.ping()
    finally:
        await client.aclose()
    assert f"version {ops.PROTOCOL_VERSION}" in str(refused.value)
    assert f"version {OLDER}" in str(refused.value)
    # Asked in plain TCP, so without the token.
    assert heard and all(hello.get("token") is None for hello in heard)


async def test_what_is_no_host_at_all_is_still_unreachable() -> None:
    async def http(stream: SocketStream) -> None:
        async with stream:
            await stream.receive()
            await stream.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(listener.serve, http)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        client = HostClient(parse_address(f"tcp://127.0.0.1:{port}", TOKEN))
        try:
            with pytest.raises(HostUnreachable, match="does not speak TLS"):
                await client.ping()
        finally:
            await client.aclose()
        tasks.cancel_scope.cancel()
