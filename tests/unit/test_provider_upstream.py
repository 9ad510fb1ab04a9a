"""The providers' HTTP client against the fake model, reached directly, through
a TLS front (trusted by ``SSL_CERT_FILE``, as the SDK's transport trusts) and
through loopback proxies named by the proxy variables: connections are kept
and reused, a closed one is left for a new one, https is verified and tunnelled
with ``CONNECT`` (over TLS to an https proxy too), plain HTTP goes to an HTTP
proxy with its whole URL, a SOCKS5 proxy is asked for a tunnel (by name for
``socks5h``, credentials when given), a header that would split the request is
never sent, and calls beyond the most in flight wait for one to end."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import ssl
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
import trustme

from stead.harness import (
    AnthropicModel,
    ModelRequest,
    ModelResponse,
    OpenAICompatibleModel,
    UpstreamError,
)
from stead.harness.providers.upstream import Upstream, UpstreamTimeout
from stead.testing import FakeModel, Text, Turn

pytestmark = pytest.mark.anyio

REQUEST = ModelRequest(
    model="m",
    system=None,
    tools=[],
    messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    max_tokens=9,
)
ANSWER = Turn([Text("answered")])
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def no_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _joined(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    server: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    async with anyio.create_task_group() as group:
        group.start_soon(_pipe, client[0], server[1])
        group.start_soon(_pipe, server[0], client[1])


@dataclass
class Front:
    """A loopback TCP (or TLS) front that forwards each connection to ``port``."""

    port: int = 0
    opened: int = 0
    ended: anyio.Event = field(default_factory=anyio.Event)
    """Set once a connection has ended on both sides (the client saw it close)."""
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def cut(self) -> None:
        """Closes every connection from the server's side, as an idle timeout would."""
        for writer in self.writers:
            writer.close()


@asynccontextmanager
async def front(target: int, tls: ssl.SSLContext | None = None) -> AsyncIterator[Front]:
    seen = Front()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.opened += 1
        seen.writers.append(writer)
        try:
            await _joined((reader, writer), await asyncio.open_connection("127.0.0.1", target))
        finally:
            seen.ended.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    seen.port = server.sockets[0].getsockname()[1]
    async with server:
        yield seen
        seen.cut()


@dataclass
class Proxy:
    port: int = 0
    heads: list[list[str]] = field(default_factory=list)
    """Each request's head as it reached the proxy: its lines."""


@asynccontextmanager
async def proxy(tls: ssl.SSLContext | None = None) -> AsyncIterator[Proxy]:
    """A forward proxy (spoken to over TLS with ``tls``): ``CONNECT host:port``
    opens a tunnel; a request with a whole URL is passed on, as it came, to the
    URL's host."""
    seen = Proxy()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        lines = head.split("\r\n")[:-2]
        seen.heads.append(lines)
        method, target, _ = lines[0].split(" ")
        authority = target if method == "CONNECT" else target.split("/")[2]
        host, _, port = authority.rpartition(":")
        upstream = await asyncio.open_connection(host, int(port))
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            upstream[1].write(head.encode("latin-1"))
        await _joined((reader, writer), upstream)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls)
    seen.port = server.sockets[0].getsockname()[1]
    async with server:
        yield seen


@dataclass
class Socks:
    port: int = 0
    credentials: bytes | None = None
    """RFC 1929's ``user`` and ``password`` it requires, as ``user:password``."""
    reply: int = 0
    """Its answer to each ``CONNECT`` (0: connected)."""
    version: int = 5
    """The version its answer to ``CONNECT`` names."""
    bound: bytes = b"\x03\x0bproxy.local"
    """The address its answer says it bound (of any type: the client skips it)."""
    offered: list[bytes] = field(default_factory=list)
    """The authentication methods each client offered."""
    logins: list[bytes] = field(default_factory=list)
    asked: list[tuple[int, str, int]] = field(default_factory=list)
    """Each ``CONNECT``'s address type (1 IPv4, 3 name, 4 IPv6), address and port."""


@asynccontextmanager
async def socks(target: int) -> AsyncIterator[Socks]:
    """A SOCKS5 proxy that records each request and connects every tunnel to
    ``target`` on 127.0.0.1, whatever it was asked for."""
    seen = Socks()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with contextlib.suppress(asyncio.IncompleteReadError):  # a client that gave up
                await answer(reader, writer)
        finally:
            writer.close()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, count = await reader.readexactly(2)
        seen.offered.append(await reader.readexactly(count))
        wanted = 2 if seen.credentials is not None else 0
        writer.write(bytes([5, wanted if wanted in seen.offered[-1] else 0xFF]))
        if wanted not in seen.offered[-1]:
            return
        if wanted == 2:
            _, size = await reader.readexactly(2)
            user = await reader.readexactly(size)
            password = await reader.readexactly((await reader.readexactly(1))[0])
            seen.logins.append(user + b":" + password)
            writer.write(bytes([1, 0 if seen.logins[-1] == seen.credentials else 1]))
            if seen.logins[-1] != seen.credentials:
                return
        _, _, _, kind = await reader.readexactly(4)
        if kind == 3:
            host = (await reader.readexactly((await reader.readexactly(1))[0])).decode()
        else:
            host = str(ipaddress.ip_address(await reader.readexactly(4 if kind == 1 else 16)))
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        seen.asked.append((kind, host, port))
        writer.write(bytes([seen.version, seen.reply, 0]) + seen.bound + b"\x04\x38")
        if seen.reply != 0:
            return
        await _joined((reader, writer), await asyncio.open_connection("127.0.0.1", target))

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    seen.port = server.sockets[0].getsockname()[1]
    async with server:
        yield seen


def _tls(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    """A server context for 127.0.0.1 and the file of the CA that signed it."""
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return context, ca_file


async def _calls(url: str, count: int = 1, api_key: str = "key") -> list[ModelResponse]:
    model = AnthropicModel(base_url=url, api_key=api_key, read_timeout=10.0, total_timeout=30.0)
    try:
        return [await model.complete(REQUEST, op_key=f"op-{i}") for i in range(count)]
    finally:
        await model.aclose()


async def test_calls_share_one_connection_and_one_the_server_closed_is_replaced() -> None:
    async with FakeModel([ANSWER]) as fake, front(fake.port) as seen:
        model = AnthropicModel(
            base_url=f"http://127.0.0.1:{seen.port}",
            api_key="key",
            read_timeout=10.0,
            total_timeout=30.0,
        )
        try:
            for i in range(3):
                await model.complete(REQUEST, op_key=f"op-{i}")
            assert seen.opened == 1
            seen.cut()
            with anyio.fail_after(10):
                await seen.ended.wait()
            answer = await model.complete(REQUEST, op_key="op-after")
        finally:
            await model.aclose()
    assert answer.content == [{"type": "text", "text": "answered"}]
    assert seen.opened == 2


async def test_https_is_verified_with_the_ca_of_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_tls, ca_file = _tls(tmp_path)
    other_ca = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    async with FakeModel([ANSWER]) as fake, front(fake.port, server_tls) as seen:
        url = f"https://127.0.0.1:{seen.port}"
        monkeypatch.setenv("SSL_CERT_FILE", str(other_ca))
        with pytest.raises(UpstreamError, match=r"connection failed.*CERTIFICATE_VERIFY_FAILED"):
            await _calls(url)
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        answers = await _calls(url, count=2)
    assert [a.content[0]["text"] for a in answers] == ["answered", "answered"]


async def test_https_goes_through_the_proxy_s_connect_tunnel_unless_no_proxy_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_tls, ca_file = _tls(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    async with FakeModel([ANSWER]) as fake, front(fake.port, server_tls) as seen, proxy() as via:
        url = f"https://127.0.0.1:{seen.port}"
        monkeypatch.setenv("HTTPS_PROXY", f"http://user:p%40ss@127.0.0.1:{via.port}")
        answers = await _calls(url, count=2)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        answers += await _calls(url)
    assert [a.content[0]["text"] for a in answers] == ["answered"] * 3
    assert len(via.heads) == 1  # one tunnel for both calls, none once bypassed
    connect, *headers = via.heads[0]
    assert connect == f"CONNECT 127.0.0.1:{seen.port} HTTP/1.1"
    credentials = base64.b64encode(b"user:p@ss").decode()
    assert f"proxy-authorization: Basic {credentials}" in headers
    assert seen.opened == 2


async def test_plain_http_goes_to_the_proxy_with_its_whole_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeModel([ANSWER]) as fake, proxy() as via:
        monkeypatch.setenv("HTTP_PROXY", f"127.0.0.1:{via.port}")
        answers = await _calls(fake.url)
        requests = fake.requests
    assert answers[0].content[0]["text"] == "answered"
    assert via.heads[0][0] == f"POST {fake.url.rstrip('/')}/v1/messages HTTP/1.1"
    assert requests[0].path == "/v1/messages"


async def test_an_https_proxy_is_verified_and_carries_https_and_plain_http(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_tls, ca_file = _tls(tmp_path)
    other_ca = tmp_path / "other.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    async with (
        FakeModel([ANSWER]) as fake,
        front(fake.port, server_tls) as seen,
        proxy(server_tls) as via,
    ):
        url = f"https://127.0.0.1:{seen.port}"
        monkeypatch.setenv("HTTPS_PROXY", f"https://127.0.0.1:{via.port}")
        monkeypatch.setenv("HTTP_PROXY", f"https://127.0.0.1:{via.port}")
        monkeypatch.setenv("SSL_CERT_FILE", str(other_ca))
        with pytest.raises(UpstreamError, match=rf"proxy 127\.0\.0\.1:{via.port}.*VERIFY_FAILED"):
            await _calls(url)
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        answers = await _calls(url, count=2)  # TLS to the upstream inside TLS to the proxy
        answers += await _calls(fake.url)
    assert [a.content[0]["text"] for a in answers] == ["answered"] * 3
    assert [head[0] for head in via.heads] == [
        f"CONNECT 127.0.0.1:{seen.port} HTTP/1.1",
        f"POST {fake.url.rstrip('/')}/v1/messages HTTP/1.1",
    ]


async def test_a_socks5h_proxy_is_given_the_name_and_a_socks5_one_an_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_tls, ca_file = _tls(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    async with FakeModel([ANSWER]) as fake, front(fake.port, server_tls) as tls_front:
        async with socks(fake.port) as via:
            via.credentials = b"user:p@ss"
            monkeypatch.setenv("ALL_PROXY", f"socks5h://user:p%40ss@127.0.0.1:{via.port}")
            answers = await _calls(f"http://localhost:{fake.port}", count=2)
            monkeypatch.setenv("ALL_PROXY", f"socks5://user:p%40ss@127.0.0.1:{via.port}")
            answers += await _calls(f"http://localhost:{fake.port}")
        assert via.offered == [b"\x00\x02"] * 2
        assert via.logins == [b"user:p@ss"] * 2
        (kind, name, port), (resolved, address, _) = via.asked
        assert (kind, name, port) == (3, "localhost", fake.port)  # one tunnel, two calls
        assert resolved in (1, 4) and ipaddress.ip_address(address).is_loopback
        async with socks(tls_front.port) as via:
            via.bound = b"\x04" + ipaddress.ip_address("::1").packed
            monkeypatch.setenv("ALL_PROXY", f"socks5://127.0.0.1:{via.port}")
            answers += await _calls(f"https://127.0.0.1:{tls_front.port}")  # TLS over it
        assert via.offered == [b"\x00"] and via.asked == [(1, "127.0.0.1", tls_front.port)]
    assert [a.content[0]["text"] for a in answers] == ["answered"] * 4


async def test_a_socks_proxy_s_refusal_is_named_in_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with FakeModel([ANSWER]) as fake, socks(fake.port) as via:
        via.credentials = b"user:right"
        monkeypatch.setenv("ALL_PROXY", f"socks5h://user:wrong@127.0.0.1:{via.port}")
        with pytest.raises(UpstreamError, match="refused the user name and password"):
            await _calls(fake.url)
        monkeypatch.setenv("ALL_PROXY", f"socks5h://127.0.0.1:{via.port}")
        with pytest.raises(UpstreamError, match="accepts none of the ways stead can auth"):
            await _calls(fake.url)
        monkeypatch.setenv("ALL_PROXY", f"socks5h://user@127.0.0.1:{via.port}")
        with pytest.raises(UpstreamError, match="user name and password are 1 to 255 bytes"):
            await _calls(fake.url)
        via.credentials = None
        monkeypatch.setenv("ALL_PROXY", f"socks5h://127.0.0.1:{via.port}")
        with pytest.raises(UpstreamError, match="a name a proxy resolves is at most 255"):
            await _calls(f"http://{'a' * 60}.{'b' * 60}.{'c' * 60}.{'d' * 60}.{'e' * 60}.test")
        via.version = 4
        with pytest.raises(UpstreamError, match="does not speak SOCKS5"):
            await _calls(fake.url)
        via.version, via.reply = 5, 5
        with pytest.raises(
            UpstreamError, match=r"did not connect to 127\.0\.0\.1:\d+: connection ref"
        ):
            await _calls(fake.url)
        assert fake.request_count == 0


async def test_a_proxy_stead_cannot_use_is_named_in_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks4://user:hunter2-secret@127.0.0.1:1080")
    with pytest.raises(
        UpstreamError, match=r"socks4://127\.0\.0\.1:1080.*only an http://, https://, socks5://"
    ) as refused:
        await _calls("https://api.anthropic.com")
    # Not percent-encoded, a "/" or "#" ends the authority inside the password.
    for raw in ("http://user:hunter2/secret@127.0.0.1:3128", "socks5h://u:12#secret@proxy"):
        monkeypatch.setenv("HTTPS_PROXY", raw)
        with pytest.raises(UpstreamError, match="percent-encoded credentials") as garbled:
            await _calls("https://api.anthropic.com")
        assert "secret" not in str(garbled.value)
    assert "hunter2-secret" not in str(refused.value)


async def test_a_header_that_would_split_the_request_is_never_sent() -> None:
    async with FakeModel([ANSWER]) as fake:
        with pytest.raises(UpstreamError, match="a request header holds a line break"):
            await _calls(fake.url, api_key="key\r\nx-injected: 1")
        assert fake.request_count == 0


@dataclass
class HeldServer:
    """Answers each request only once ``release`` is set (``trickle``: starts
    answering at once but sends the body's last byte only then, one byte a
    tenth of a second before it); counts the requests it holds at once and the
    connections made to it."""

    port: int = 0
    holding: int = 0
    most_held: int = 0
    connections: int = 0
    arrived: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    wanted: int = 1
    trickle: bool = False

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                self.holding += 1
                self.most_held = max(self.most_held, self.holding)
                if self.holding >= self.wanted:
                    self.arrived.set()
                body = b"ok"
                if self.trickle:
                    body = b"." * 1000
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
                    while not self.release.is_set():
                        writer.write(body[:1])
                        body = body[1:]
                        with anyio.move_on_after(0.1):
                            await self.release.wait()
                else:
                    await self.release.wait()
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
                self.holding -= 1
                writer.write(body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def held_server(wanted: int, trickle: bool = False) -> AsyncIterator[HeldServer]:
    held = HeldServer(wanted=wanted, trickle=trickle)
    server = await asyncio.start_server(held.serve, "127.0.0.1", 0)
    held.port = server.sockets[0].getsockname()[1]
    try:
        yield held
    finally:
        held.release.set()
        server.close()


async def _post(upstream: Upstream) -> bytes:
    async with upstream.post("/v1/messages", b"{}", {}) as response:
        return await response.read(1000)


async def test_calls_beyond_the_most_in_flight_wait_for_one_to_end() -> None:
    async with held_server(wanted=2) as held:
        upstream = Upstream(f"http://127.0.0.1:{held.port}", timeout=30.0, max_in_flight=2)
        try:
            async with anyio.create_task_group() as group:
                for _ in range(3):
                    group.start_soon(_post, upstream)
                with anyio.fail_after(10):
                    await held.arrived.wait()
                # A third call that did not wait would reach the server meanwhile.
                await anyio.sleep(0.3)
                held.release.set()
        finally:
            await upstream.aclose()
    assert held.most_held == 2
    assert held.connections == 2  # the third call took a connection the first two left


async def test_a_call_that_finds_no_free_slot_in_time_times_out_naming_the_bound() -> None:
    # The call in flight goes on (its answer keeps coming); the one behind it
    # waits no longer than the timeout for it to end.
    async with held_server(wanted=1, trickle=True) as held:
        upstream = Upstream(f"http://127.0.0.1:{held.port}", timeout=1.0, max_in_flight=1)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(_post, upstream)
                with anyio.fail_after(10):
                    await held.arrived.wait()
                with pytest.raises(UpstreamTimeout, match="1 in flight, the most at once"):
                    await _post(upstream)
                held.release.set()
        finally:
            await upstream.aclose()
    assert held.connections == 1


@asynccontextmanager
async def redirecting() -> AsyncIterator[int]:
    """A server that answers every request with a redirect to the API's https URL."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            writer.write(
                b"HTTP/1.1 301 Moved Permanently\r\nlocation: https://api.example.test/\r\n"
                b"content-type: text/html\r\ncontent-length: 14\r\n\r\n<html>moved..."
            )
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    async with server:
        yield server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_redirect_is_an_error_naming_it_and_not_tried_again(provider: str) -> None:
    async with redirecting() as port:
        url = f"http://127.0.0.1:{port}"
        client = (
            AnthropicModel(base_url=url, api_key="k", read_timeout=5.0, total_timeout=10.0)
            if provider == "anthropic"
            else OpenAICompatibleModel(
                base_url=url, api_key="k", read_timeout=5.0, total_timeout=10.0
            )
        )
        with pytest.raises(UpstreamError) as failed:
            await client.complete(REQUEST, op_key="op")
        await client.aclose()
    assert (failed.value.status, failed.value.retryable) == (301, False)
    assert str(failed.value).startswith("upstream answered 301 (to 'https://api.example.test/'")
