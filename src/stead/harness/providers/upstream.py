"""HTTP/1.1 to one model upstream, on asyncio with httptools' parser.

Both providers call one upstream over and over: a turn makes a call per step.
Measured against the fake model on a 2-core machine, one streamed call cost
1.7 ms of CPU through ``httpx2`` (its request, auth, redirect and stream
layers over ``httpcore2``'s pool, h11 and anyio; 1.1 ms through ``httpcore2``
alone), and 0.3 ms here, SSE decoding and the answer's assembly included: a
protocol that hands httptools (uvicorn's parser) the bytes and the caller the
body's chunks. It keeps what ``httpx2``'s defaults
gave the providers:

* trust: ``httpx2.create_ssl_context`` (``SSL_CERT_FILE`` / ``SSL_CERT_DIR``,
  else the system's CAs), made at the first https connection; a plain-HTTP
  upstream loads no CA;
* the proxy variables (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``,
  ``NO_PROXY``): ``http://``, ``https://``, ``socks5://`` and ``socks5h://``
  proxies (``proxies.py``);
* one timeout for connecting (TLS and tunnel included) and for each wait on
  the peer, as ``httpx2.Timeout(t)`` has it;
* idle connections kept for the next call (up to ``MAX_IDLE``), dropped when
  the server closes them or sends on them unasked;
* at most ``MAX_IN_FLIGHT`` calls at once: a call beyond them waits for one to
  end (within the timeout), so a burst of turns cannot open connections (and
  file descriptors) without bound.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import cast
from urllib.parse import urlsplit

import anyio
import httptools

from stead.harness.model import UpstreamError
from stead.harness.providers.proxies import (
    Proxy,
    ProxyError,
    http_tunnel,
    proxy_for,
    socks_tunnel,
)

MAX_IDLE = 100
"""Idle connections kept: the SDK's own keep-alive bound (many turns run at once)."""
MAX_IN_FLIGHT = 1000
"""Calls at once, each on a connection of its own: the SDK's own connection bound."""


class UpstreamTimeout(Exception):
    """Connecting or a wait on the peer took longer than the timeout."""


class UpstreamBroken(Exception):
    """No connection could be made, it broke, or what came is not HTTP."""


def detail(exc: Exception) -> str:
    """``": <what exc says>"``, or nothing when it says nothing (a bare timeout)."""
    return f": {exc}" if str(exc) else ""


def not_an_answer(response: Response) -> UpstreamError:
    """The error for an answer whose status is under 400 but not 200 (a redirect,
    most likely: the base URL is not the API's). Not tried again: it answers so
    every time, where it was taken for a server error and retried."""
    where = response.headers.get("location")
    moved = f" (to {where[:200]!r}: is the base URL the API's?)" if where else ""
    return UpstreamError(
        f"upstream answered {response.status}{moved}, not an answer",
        status=response.status,
        retryable=False,
    )


def retry_after(headers: Mapping[str, str]) -> float | None:
    """An answer's ``retry-after`` in seconds, if it gives them."""
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _authority(host: str, port: int | None = None) -> str:
    """``host:port`` as a request line or ``Host`` header writes it (IPv6 in brackets)."""
    name = f"[{host}]" if ":" in host else host
    return name if port is None else f"{name}:{port}"


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(UpstreamTimeout())


class _Connection(asyncio.Protocol):
    """One connection, one exchange at a time. httptools calls the ``on_*``
    methods from ``data_received``; the exchange's task waits in ``wait``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.error: str | None = None
        self.raw: bytearray | None = None
        """Set while a proxy's answer to ``CONNECT`` is read (no parser then)."""
        self._parser: httptools.HttpResponseParser | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self.headed = False
        self.keep_alive = False
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: deque[bytes] = deque()
        self.complete = False

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if self.complete:
            self._fail("the server sent past the end of its answer")
        elif self._parser is not None:
            try:
                self._parser.feed_data(data)
            except httptools.HttpParserError as exc:
                self._fail(f"not an HTTP answer: {exc}")
        elif self.raw is not None:
            self.raw += data
        else:
            self._fail("the server sent on an idle connection")
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake()

    # httptools' side

    def on_header(self, name: bytes, value: bytes) -> None:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        seen = self.headers.get(key)
        self.headers[key] = text if seen is None else f"{seen}, {text}"

    def on_headers_complete(self) -> None:
        assert self._parser is not None
        self.headed = True
        self.status = self._parser.get_status_code()
        # Asked here: once the message is complete the parser has reset.
        self.keep_alive = self._parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # the exchange's side

    def begin(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.headed, self.keep_alive, self.status, self.complete = False, False, 0, False
        self.headers = {}
        self.chunks.clear()

    def settle(self) -> bool:
        """Ends the exchange; True when the connection can carry another."""
        self._parser = None
        return self.complete and self.keep_alive and self.idle_usable()

    def idle_usable(self) -> bool:
        assert self.transport is not None
        return not self.lost and self.error is None and not self.transport.is_closing()

    def check(self) -> None:
        """Raises what ended the exchange early, if anything did."""
        if self.error is not None:
            raise UpstreamBroken(self.error)
        if self.lost and not self.complete:
            if self.headed and _ends_at_close(self.headers):
                self.complete = True  # a body without a length ends with the connection
                return
            where = "mid-answer" if self.headed else "before answering"
            raise UpstreamBroken(f"the server closed the connection {where}")

    async def wait(self, seconds: float) -> None:
        """Until the peer sends or closes, or writing may go on; ``UpstreamTimeout``
        after ``seconds`` (a timer handle: a read costs no cancel scope)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_later(seconds, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    async def send(self, data: bytes, seconds: float) -> None:
        """Writes ``data``; waits while the transport's buffer is full."""
        assert self.transport is not None
        self.transport.write(data)
        while self._paused:
            self.check()
            if self.lost:
                raise UpstreamBroken("the server closed the connection before answering")
            await self.wait(seconds)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _fail(self, error: str) -> None:
        self.error = error
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _ends_at_close(headers: Mapping[str, str]) -> bool:
    return (
        "content-length" not in headers
        and "chunked" not in headers.get("transfer-encoding", "").lower()
    )


class Response:
    """An answer's status and headers (names in lower case); its body is read
    while the ``post`` block is open."""

    def __init__(self, connection: _Connection, timeout: float) -> None:
        self._connection = connection
        self._timeout = timeout
        self.status = connection.status
        self.headers: Mapping[str, str] = connection.headers

    async def chunks(self) -> AsyncIterator[bytes]:
        connection = self._connection
        while True:
            while connection.chunks:
                yield connection.chunks.popleft()
            connection.check()
            if connection.complete:
                return
            await connection.wait(self._timeout)

    async def read(self, limit: int) -> bytes:
        """The body, or its first ``limit`` bytes and somewhat more."""
        body = bytearray()
        async for chunk in self.chunks():
            body += chunk
            if len(body) >= limit:
                break
        return bytes(body)


class Upstream:
    """HTTP/1.1 to the origin of ``base_url``: ``post`` a request under its path."""

    def __init__(
        self, base_url: str, *, timeout: float, max_in_flight: int = MAX_IN_FLIGHT
    ) -> None:
        parts = urlsplit(base_url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http(s) URL")
        self._tls = scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        self._authority = _authority(self._host, parts.port)
        self._base_path = parts.path.rstrip("/")
        self._proxy: Proxy | None = None
        self._refused: str | None = None
        """Why no call can be made (a proxy variable stead cannot use), said by each call."""
        try:
            self._proxy = proxy_for(scheme, self._host)
        except ProxyError as exc:
            self._refused = str(exc)
        self._timeout = timeout
        self._context: ssl.SSLContext | None = None
        self._idle: list[_Connection] = []
        self._max_in_flight = max_in_flight
        self._slots = asyncio.Semaphore(max_in_flight)

    @asynccontextmanager
    async def post(
        self, path: str, body: bytes, headers: Mapping[str, str]
    ) -> AsyncIterator[Response]:
        head = self._head(path, headers, len(body))
        await self._slot()
        reusable = False
        connection: _Connection | None = None
        try:
            connection = await self._connection()
            connection.begin()
            await connection.send(head + body, self._timeout)
            while not connection.headed:
                connection.check()
                await connection.wait(self._timeout)
            yield Response(connection, self._timeout)
            reusable = connection.settle()
        finally:
            self._slots.release()
            if connection is not None and reusable and len(self._idle) < MAX_IDLE:
                self._idle.append(connection)
            elif connection is not None:
                connection.close()

    async def _slot(self) -> None:
        """Waits (within the timeout) until fewer than ``max_in_flight`` calls run."""
        if not self._slots.locked():  # a free slot needs no task or timer
            await self._slots.acquire()
            return
        try:
            await asyncio.wait_for(self._slots.acquire(), self._timeout)
        except TimeoutError:
            raise UpstreamTimeout(
                f"no call to the upstream ended in {self._timeout:g}s"
                f" ({self._max_in_flight} in flight, the most at once)"
            ) from None

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _head(self, path: str, headers: Mapping[str, str], length: int) -> bytes:
        if self._refused is not None:
            raise UpstreamBroken(self._refused)
        target = self._base_path + path
        if self._plain_proxy():
            target = f"http://{self._authority}{target}"  # a proxy is sent the whole URL
        lines = [f"POST {target} HTTP/1.1", f"host: {self._authority}"]
        if self._plain_proxy() and self._proxy is not None and self._proxy.authorization:
            lines.append(f"proxy-authorization: {self._proxy.authorization}")
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines.append(f"content-length: {length}")
        text = "\r\n".join(lines)
        if "\r" in text.replace("\r\n", "") or text.count("\n") != len(lines) - 1:
            raise UpstreamBroken("a request header holds a line break")
        try:
            return (text + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError:
            raise UpstreamBroken("a request header is not Latin-1 text") from None

    def _plain_proxy(self) -> bool:
        """Requests go to an HTTP proxy, which forwards them (no tunnel)."""
        return self._proxy is not None and self._proxy.forwards_http and not self._tls

    async def _connection(self) -> _Connection:
        while self._idle:
            connection = self._idle.pop()
            if connection.idle_usable():
                return connection
            connection.close()
        return await self._open()

    async def _open(self) -> _Connection:
        proxy = self._proxy
        connection: _Connection | None = None
        try:
            with anyio.fail_after(self._timeout):
                if proxy is None:
                    connection = await self._connect(self._host, self._port, tls=self._tls)
                    return connection
                connection = await self._connect(proxy.host, proxy.port, tls=proxy.tls)
                if self._plain_proxy():
                    return connection  # requests go to the proxy, whole URL and all
                if proxy.forwards_http:
                    authority = _authority(self._host, self._port)
                    await http_tunnel(connection, proxy, authority, self._timeout)
                else:
                    await socks_tunnel(connection, proxy, self._host, self._port, self._timeout)
                if self._tls:  # over the tunnel (over TLS to an https proxy: TLS in TLS)
                    assert connection.transport is not None
                    connection.transport = await asyncio.get_running_loop().start_tls(
                        connection.transport,
                        connection,
                        self._tls_context(),
                        server_hostname=self._host,
                    )
                return connection
        except BaseException as exc:
            if connection is not None:
                connection.close()  # a tunnel or handshake cut short, or cancelled
            if isinstance(exc, TimeoutError):
                raise UpstreamTimeout() from None
            if isinstance(exc, ProxyError):
                raise UpstreamBroken(str(exc)) from None
            if isinstance(exc, OSError):  # ssl.SSLError among them
                where = str(proxy) if proxy else self._authority
                raise UpstreamBroken(f"cannot connect to {where}: {exc}") from None
            raise

    async def _connect(self, host: str, port: int, *, tls: bool) -> _Connection:
        _, connection = await asyncio.get_running_loop().create_connection(
            _Connection,
            host,
            port,
            ssl=self._tls_context() if tls else None,
            server_hostname=host if tls else None,
        )
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        if self._context is None:
            import httpx2  # at the first https connection; its trust is the SDK's

            self._context = httpx2.create_ssl_context()
        return self._context
