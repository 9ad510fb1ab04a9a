"""A brain and a sandbox host of different stead versions refuse each other
over TCP with a message naming both versions, as they do on the Unix socket;
a local host of an earlier stead left running across an upgrade is shown and
stopped as any host is.

A host from before the TCP transport became TLS (host protocol 8 and older)
reads frames in plain TCP: it takes a TLS handshake for a frame too large and
answers in a plain frame the brain's TLS cannot read. The brain must still
learn that it is a host of another version, not a host that is away: a host
away is one whose sandboxes a turn moves to its own host, with only their
last snapshot, and an older host during a rolling upgrade is alive and holds
them."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream

from stead.sandbox import HostClient, HostUnreachable, VersionMismatch, ops, parse_address
from stead.sandbox.protocol import MAX_FRAME
from stead.testing import ServeForker, ServerProcess, client_tls

pytestmark = pytest.mark.anyio
TOKEN = "a-token-of-more-than-16-characters"
OLDER = 8
COMMAND_TIMEOUT = 60.0


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


OLDER_LOCAL_HOST = """
import json, socket, struct, sys

def exactly(conn, n):
    data = b""
    while len(data) < n:
        data += conn.recv(n - len(data)) or sys.exit(0)
    return data

server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen()
print("ready", flush=True)
while True:
    conn, _ = server.accept()
    with conn:
        try:
            (length,) = struct.unpack(">I", exactly(conn, 4))
            version = json.loads(exactly(conn, length)).get("version")
        except (OSError, SystemExit, ValueError):
            continue
        message = (
            f"the brain speaks host protocol version {version} and this sandbox host "
            "version 8: run the same stead version on both"
        )
        data = json.dumps({"error": "VersionMismatch", "message": message}).encode()
        conn.sendall(struct.pack(">I", len(data)) + data)
"""


@pytest.fixture
def older_local_host(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A host of an earlier stead on its Unix socket, left running across an
    upgrade (``stead serve`` starts one that outlives it): its socket path and
    its process."""
    socket_path = tmp_path / "host.sock"
    argv = [sys.executable, "-c", OLDER_LOCAL_HOST, str(socket_path)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield socket_path, process
        process.kill()


def _host_command(socket_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
    return subprocess.run(
        [sys.executable, "-m", "stead", "sandbox-host", *args],
        env={**inherited, "STEAD_SANDBOX_HOST": str(socket_path)},
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def test_a_host_of_an_older_stead_left_running_is_shown_and_stopped(
    older_local_host: tuple[Path, subprocess.Popen[str]],
) -> None:
    """After an upgrade, ``stead serve`` finds the host the earlier one started
    and cannot use it; the operator is told so, and can stop it as any host."""
    socket_path, process = older_local_host
    status = _host_command(socket_path, "status")
    assert status.returncode == 1
    assert status.stdout.splitlines()[0] == (
        f"a sandbox host of another stead version (pid {process.pid}) at {socket_path}"
    )
    assert "version 8" in status.stdout and f"version {ops.PROTOCOL_VERSION}" in status.stdout

    stopped = _host_command(socket_path, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == (
        f"stopped the sandbox host of another stead version (pid {process.pid}) at {socket_path}"
    )
    assert process.wait(timeout=COMMAND_TIMEOUT) == -signal.SIGTERM


def test_readiness_names_a_host_of_another_version(
    older_local_host: tuple[Path, subprocess.Popen[str]], tmp_path: Path, forker: ServeForker
) -> None:
    socket_path, _ = older_local_host
    env = {"STEAD_SANDBOX": "bwrap", "STEAD_SANDBOX_HOST": str(socket_path)}
    server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
    try:
        with httpx2.Client(verify=client_tls(), timeout=COMMAND_TIMEOUT) as http:
            ready = http.get(f"{server.url}/readyz")
    finally:
        server.stop()
    assert ready.status_code == 503
    found = ready.json()["checks"]["sandbox_host"]
    assert found.startswith("another stead version:") and "version 8" in found
