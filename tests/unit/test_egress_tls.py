"""TLS termination and credential injection in the EgressProxy, over real sockets:
a loopback HTTPS origin with a certificate from a test CA (``trustme``), the
proxy's egress CA made in a temporary directory, and a client that trusts only
that CA. Nothing leaves 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import ssl
import stat
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import h11
import pytest
import trustme
from anyio.abc import ByteStream, SocketStream
from anyio.streams.tls import TLSListener, TLSStream

from stead.egress_policy import HostSet, upstream_context
from stead.sandbox_host.egress import (
    AuditLog,
    CertificateAuthority,
    EgressProxy,
    EgressTls,
    HeaderSecret,
    PlaceholderSecret,
    Secrets,
)
from stead.testing import serve_origin
from tests.unit.test_egress_proxy import echo, eventually, limited, read_head, serving

pytestmark = pytest.mark.anyio

WAIT = 10.0
SECRET = b"s3cret-value-" + os.urandom(8).hex().encode()
PLACEHOLDER = b"stead_placeholder_" + os.urandom(20).hex().encode()


@dataclass
class Origin:
    port: int
    seen: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0


@pytest.fixture(scope="module")
def test_ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="egress-tls-", dir="/tmp") as directory:
        yield Path(directory)


@pytest.fixture
def tls(workdir: Path, test_ca: trustme.CA) -> EgressTls:
    bundle = workdir / "extra-ca.pem"
    test_ca.cert_pem.write_to_path(str(bundle))
    ca = CertificateAuthority.load_or_create(workdir / "egress-ca")
    return EgressTls(ca, upstream_context(bundle))


@asynccontextmanager
async def https_origin(
    ca: trustme.CA, *names: str, handler: Callable[[TLSStream], Awaitable[None]] | None = None
) -> AsyncIterator[Origin]:
    """A keep-alive HTTPS server that records each request and answers ``ok``
    (or runs ``handler`` for each connection)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*(names or ("api.test",))).configure_cert(context)
    listener = TLSListener(
        await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0),
        context,
        standard_compatible=False,
    )
    port = listener.listener.extra(anyio.abc.SocketAttribute.local_port)
    found = Origin(port)

    def record(request: h11.Request, body: bytes) -> bytes:
        headers = {n.decode(): v.decode() for n, v in request.headers}
        found.seen.append({"target": request.target.decode(), "headers": headers, "body": body})
        return b"ok"

    async def serve(stream: TLSStream) -> None:
        found.connections += 1
        await serve_origin(stream, record)

    async with listener, anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, handler or serve)
        yield found
        tasks.cancel_scope.cancel()


@asynccontextmanager
async def proxy(
    path: Path, tls: EgressTls, secrets: Secrets, *hosts: str
) -> AsyncIterator[EgressProxy]:
    pinned = dict.fromkeys(hosts, "127.0.0.1")
    async with EgressProxy(
        path,
        limited(*hosts),
        connect_timeout=WAIT,
        idle_timeout=WAIT,
        secrets=secrets,
        tls=tls,
        pinned=pinned,
        audit=AuditLog(),
    ) as running:
        yield running


async def open_tunnel(path: Path, host: str, port: int, tls: EgressTls) -> TLSStream:
    stream = await anyio.connect_unix(str(path))
    await stream.send(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += await stream.receive()
    assert head.startswith(b"HTTP/1.1 200"), head
    trusting = ssl.create_default_context(cadata=tls.ca.cert_pem.decode())
    return await TLSStream.wrap(
        stream, hostname=host, ssl_context=trusting, standard_compatible=False
    )


async def request(
    stream: ByteStream,
    conn: h11.Connection,
    method: str,
    target: str,
    host: str,
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
) -> tuple[int, bytes]:
    framing = [("content-length", str(len(body)))] if body else []
    out = conn.send(
        h11.Request(
            method=method, target=target, headers=[("host", host), *(headers or []), *framing]
        )
    )
    if body:
        out += conn.send(h11.Data(data=body))
    out += conn.send(h11.EndOfMessage())
    await stream.send(out)
    status, data = 0, b""
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive())
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            data += event.data
        elif isinstance(event, h11.EndOfMessage):
            if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
                conn.start_next_cycle()
            return status, data
        else:
            raise AssertionError(event)


def placeholder_secret(*hosts: str, header: bool = True, body: bool = True) -> PlaceholderSecret:
    return PlaceholderSecret(
        "vcrd_env", PLACEHOLDER, SECRET, HostSet(hosts), header=header, body=body
    )


async def test_the_ca_is_made_once_with_a_private_key(workdir: Path) -> None:
    first = CertificateAuthority.load_or_create(workdir / "ca")
    again = CertificateAuthority.load_or_create(workdir / "ca")
    assert first.cert_pem == again.cert_pem
    assert stat.S_IMODE((workdir / "ca" / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((workdir / "ca").stat().st_mode) == 0o700
    assert "key" not in repr(first).lower()


async def test_requests_in_a_kept_alive_tunnel_get_their_credentials(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    path = workdir / "proxy.sock"
    async with https_origin(test_ca) as origin, proxy(path, tls, Secrets(), "api.test") as running:
        running.secrets = Secrets(
            [HeaderSecret("api.test", b"x-api-key", SECRET, "vcrd_header", port=origin.port)],
            [placeholder_secret("api.test")],
        )
        stream = await open_tunnel(path, "api.test", origin.port, tls)
        conn = h11.Connection(h11.CLIENT)
        auth = [("authorization", f"Bearer {PLACEHOLDER.decode()}")]
        assert await request(stream, conn, "GET", "/one", "api.test", auth) == (200, b"ok")
        body = json.dumps({"key": PLACEHOLDER.decode()}).encode()
        assert await request(stream, conn, "POST", "/two", "api.test", body=body) == (200, b"ok")
        await stream.aclose()
        assert origin.connections == 1  # one upstream connection for both requests
        first, second = origin.seen
        assert first["headers"]["authorization"] == f"Bearer {SECRET.decode()}"
        assert first["headers"]["x-api-key"] == SECRET.decode()
        assert first["headers"]["host"] == f"api.test:{origin.port}"
        assert json.loads(second["body"]) == {"key": SECRET.decode()}
        entries = running.audit.read() if running.audit else []
        assert [(e.method, e.status, e.host) for e in entries] == [
            ("GET", 200, "api.test"),
            ("POST", 200, "api.test"),
        ]
        assert entries[0].credential_ids == ("vcrd_env", "vcrd_header")
        assert all(e.bytes_out > 0 and e.bytes_in > 0 for e in entries)
        assert SECRET.decode() not in repr(entries) + repr(running.secrets)


async def test_a_placeholder_headed_for_another_host_is_refused(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    secrets = Secrets([], [placeholder_secret("api.test")])
    path = workdir / "proxy.sock"
    async with (
        https_origin(test_ca, "other.test") as origin,
        proxy(path, tls, secrets, "api.test", "other.test") as running,
    ):
        auth = [("authorization", f"Bearer {PLACEHOLDER.decode()}")]
        async with await open_tunnel(path, "other.test", origin.port, tls) as stream:
            conn = h11.Connection(h11.CLIENT)
            status, text = await request(stream, conn, "GET", "/", "other.test", auth)
        assert status == 403
        assert b"vcrd_env" in text and b"not replaced" in text
        # A streamed body is watched too, a placeholder split across chunks included.
        async with await open_tunnel(path, "other.test", origin.port, tls) as stream:
            conn = h11.Connection(h11.CLIENT)
            body = b"x" * 70_000 + PLACEHOLDER
            status, _ = await request(stream, conn, "POST", "/", "other.test", body=body)
        assert status == 403
        assert origin.seen == []
        assert running.audit is not None
        assert [e.status for e in running.audit.read()] == [403, 403]


async def test_an_origin_with_an_untrusted_certificate_is_a_502(
    workdir: Path, tls: EgressTls
) -> None:
    stranger = trustme.CA()
    path = workdir / "proxy.sock"
    async with https_origin(stranger) as origin, proxy(path, tls, Secrets(), "api.test"):
        async with await open_tunnel(path, "api.test", origin.port, tls) as stream:
            status, text = await request(stream, h11.Connection(h11.CLIENT), "GET", "/", "api.test")
        assert status == 502
        assert b"certificate is not trusted" in text
        assert origin.seen == []


async def test_a_tunnel_that_is_not_tls_is_relayed_untouched(workdir: Path, tls: EgressTls) -> None:
    path = workdir / "proxy.sock"
    async with serving(echo) as port, proxy(path, tls, Secrets(), "raw.test") as running:
        head = f"CONNECT raw.test:{port} HTTP/1.1\r\nHost: raw.test:{port}\r\n\r\n"
        async with await anyio.connect_unix(str(path)) as stream:
            await stream.send(head.encode() + b"SSH-2.0-hello\r\n")
            got = b""
            with anyio.fail_after(WAIT):
                while b"hello" not in got:
                    got += await stream.receive()
        assert got.endswith(b"SSH-2.0-hello\r\n")
    assert running.audit is not None
    [entry] = running.audit.read()
    assert (entry.method, entry.host, entry.status) == ("CONNECT", "raw.test", 200)


async def test_a_plain_http_request_gets_the_same_injection(workdir: Path, tls: EgressTls) -> None:
    seen: list[bytes] = []

    async def origin(stream: SocketStream) -> None:
        async with stream:
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive()
            seen.append(data)
            await stream.send(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")

    path = workdir / "proxy.sock"
    secrets = Secrets([], [placeholder_secret("plain.test")])
    async with serving(origin) as port, proxy(path, tls, secrets, "plain.test"):
        async with await anyio.connect_unix(str(path)) as stream:
            await stream.send(
                f"GET http://plain.test:{port}/ HTTP/1.1\r\nHost: plain.test\r\n"
                f"Authorization: Bearer {PLACEHOLDER.decode()}\r\n\r\n".encode()
            )
            answer = b""
            with anyio.fail_after(WAIT):
                while b"\r\n\r\n" not in answer:
                    answer += await stream.receive()
        assert answer.startswith(b"HTTP/1.1 204")
    assert b"Bearer " + SECRET in seen[0]
    assert PLACEHOLDER not in seen[0]


async def test_an_origin_that_echoes_a_secret_returns_only_its_placeholder(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    def echo_auth(request: h11.Request, body: bytes) -> bytes:
        auth = dict(request.headers)[b"authorization"]
        return b"a" * 70_000 + auth + b"|" + body + b"|" + b"z" * 100

    secrets = Secrets([], [placeholder_secret("api.test")])
    path = workdir / "proxy.sock"

    async def serve(stream: TLSStream) -> None:
        await serve_origin(stream, echo_auth)

    async with (
        https_origin(test_ca, handler=serve) as origin,
        proxy(path, tls, secrets, "api.test"),
    ):
        port = origin.port
        async with await open_tunnel(path, "api.test", port, tls) as stream:
            conn = h11.Connection(h11.CLIENT)
            auth = [("authorization", f"Bearer {PLACEHOLDER.decode()}")]
            status, data = await request(stream, conn, "POST", "/", "api.test", auth, PLACEHOLDER)
            assert (status, SECRET in data) == (200, False)
            expected = b"a" * 70_000 + b"Bearer " + PLACEHOLDER + b"|" + PLACEHOLDER + b"|"
            assert data == expected + b"z" * 100
            # The connection stays usable after a rewritten, re-framed answer.
            assert (await request(stream, conn, "POST", "/", "api.test", auth, b"x"))[0] == 200


async def test_credentials_replaced_while_a_tunnel_is_open_apply_to_its_next_request(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    path = workdir / "proxy.sock"
    async with https_origin(test_ca) as origin, proxy(path, tls, Secrets(), "api.test") as running:
        secret = HeaderSecret("api.test", b"x-api-key", SECRET, "vcrd_header", port=origin.port)
        running.secrets = Secrets([secret])
        stream = await open_tunnel(path, "api.test", origin.port, tls)
        async with stream:
            conn = h11.Connection(h11.CLIENT)
            assert (await request(stream, conn, "GET", "/", "api.test"))[0] == 200
            running.secrets = Secrets()  # revoked
            assert (await request(stream, conn, "GET", "/", "api.test"))[0] == 200
    first, second = origin.seen
    assert first["headers"]["x-api-key"] == SECRET.decode()
    assert "x-api-key" not in second["headers"]


async def test_a_policy_replaced_while_a_tunnel_is_open_applies_to_its_next_request(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    path = workdir / "proxy.sock"
    async with https_origin(test_ca) as origin, proxy(path, tls, Secrets(), "api.test") as running:
        stream = await open_tunnel(path, "api.test", origin.port, tls)
        async with stream:
            conn = h11.Connection(h11.CLIENT)
            assert (await request(stream, conn, "GET", "/one", "api.test"))[0] == 200
            running.policy = limited("other.test")  # the environment was updated
            status, text = await request(stream, conn, "GET", "/two", "api.test")
    assert status == 403 and b"not in the environment's allowed_hosts" in text
    assert [seen["target"] for seen in origin.seen] == ["/one"]


async def test_a_websocket_upgrade_inside_a_tunnel_becomes_a_byte_relay(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    async def switching(stream: TLSStream) -> None:
        async with stream:
            head = b""
            while b"\r\n\r\n" not in head:
                head += await stream.receive()
            assert b"upgrade: websocket" in head.lower()
            await stream.send(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\n\r\nhello"
            )
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                async for chunk in stream:
                    await stream.send(chunk)

    path = workdir / "proxy.sock"
    async with (
        https_origin(test_ca, handler=switching) as origin,
        proxy(path, tls, Secrets(), "api.test"),
    ):
        port = origin.port
        async with await open_tunnel(path, "api.test", port, tls) as stream:
            await stream.send(
                b"GET /ws HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\n\r\n"
            )
            got = b""
            with anyio.fail_after(WAIT):
                while not got.endswith(b"hello"):
                    got += await stream.receive()
                assert got.startswith(b"HTTP/1.1 101 ")
                await stream.send(b"ping")
                assert await stream.receive() == b"ping"


def test_a_streamed_answer_is_held_back_only_where_a_value_may_begin() -> None:
    scrubber = Secrets([], [placeholder_secret("api.test")]).for_host("api.test", 443).scrubber()
    assert scrubber is not None
    half = len(SECRET) // 2
    chunks = [b"data: 1\n\n", b"data: " + SECRET[:half], SECRET[half:] + b"\n\n", b"x" + SECRET[:3]]
    sent = [scrubber.feed(chunk) for chunk in chunks]
    assert sent == [b"data: 1\n\n", b"data: ", PLACEHOLDER + b"\n\n", b"x"]
    assert scrubber.flush() == SECRET[:3]  # the end of the answer: not a value after all


async def test_what_a_sandbox_sends_does_not_grow_the_hosts_log(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA, caplog: pytest.LogCaptureFixture
) -> None:
    """Every request is in the sandbox's audit log; before, a denied one and a
    TLS handshake that failed were each a line of the host's log at its default
    level (info) too: a sandbox asking in a loop filled the host's disk."""
    caplog.set_level(logging.INFO)
    path = workdir / "proxy.sock"
    async with https_origin(test_ca) as origin, proxy(path, tls, Secrets(), "api.test") as running:
        for _ in range(10):
            async with await anyio.connect_unix(str(path)) as stream:
                await stream.send(b"CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test\r\n\r\n")
                assert (await read_head(stream))[0] == 403
            async with await anyio.connect_unix(str(path)) as stream:
                authority = f"api.test:{origin.port}"
                await stream.send(
                    f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode()
                )
                assert (await read_head(stream))[0] == 200
                distrusting = ssl.create_default_context()  # not the egress CA
                with contextlib.suppress(ssl.SSLError, anyio.BrokenResourceError):
                    await TLSStream.wrap(stream, hostname="api.test", ssl_context=distrusting)
        audit = running.audit
        assert audit is not None
        await eventually(lambda: len(audit.read()) == 20)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("stead")] == []
