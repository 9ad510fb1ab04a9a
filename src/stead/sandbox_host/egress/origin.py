"""Forwarding one HTTP request to its origin and streaming the answer back.

The request goes out in origin form (``GET /path?q``) with ``Host`` set to the
authority the client asked the proxy for (so a client cannot reach another
virtual host behind an allowed address) and hop-by-hop headers removed. A plain
``http://`` request travels alone (``Connection: close``); requests decrypted
from a CONNECT tunnel (``intercept.py``) keep both connections alive. h11 frames
both sides, so bodies stream in chunks and are never buffered whole, except
one the credentials must be injected into (read whole: ``Bodies`` bounds each and all at once).

Errors before the response head reaches the client are raised as
``UpstreamFailed``/``UpstreamTimeout`` (the caller answers 502/504),
``Refused``/``TooLarge`` or ``BadRequest``; after it, the only signal left is
closing the connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
import h11
from anyio.abc import ByteStream

from stead.egress_policy import EgressError, UpstreamFailed, UpstreamTimeout
from stead.sandbox_host.egress.audit import Exchange
from stead.sandbox_host.egress.errors import BadRequest, Crowded, TooLarge, Unsendable
from stead.sandbox_host.egress.request import MAX_HEAD_BYTES, Target, receive_into
from stead.sandbox_host.egress.scrub import Scrubber
from stead.sandbox_host.egress.secrets import HostSecrets, credential_ids
from stead.sandbox_host.egress.splice import splice

Headers = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
        b"expect",  # the proxy answers ``100 Continue`` itself
    }
)
"""Headers that describe one hop, never forwarded. ``Transfer-Encoding`` is hop-by-hop
too, but h11 needs it (and ``Content-Length``) to frame the next hop's message and
re-encodes the body itself."""

FRAMING = frozenset({b"content-length", b"transfer-encoding", b"host"})

_GONE = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError)


class _ClientGone(Exception):
    """The client closed, broke or stalled; there is nobody left to answer."""


async def forward(
    client: ByteStream,
    conn: h11.Connection,
    request: h11.Request,
    target: Target,
    upstream: ByteStream,
    *,
    idle_timeout: float,
    secrets: HostSecrets,
    exchange: Exchange,
    bodies: Bodies,
    origin: h11.Connection | None = None,
) -> bool:
    """Sends ``request`` (its body still unread on ``client``/``conn``) to ``upstream``
    and relays the response. Each read and write waits at most ``idle_timeout``.
    With ``origin`` (the upstream's h11 connection, kept across requests) both
    connections stay open when both peers allow; returns whether they may carry
    another request. Does not close either stream."""
    hop = _Hop(client, conn, upstream, target, idle_timeout, exchange, origin)
    scrub = secrets.scrubber()
    try:
        await hop.send_request(request, secrets, bodies, plain=scrub is not None)
        response = await hop.response_head()
        exchange.status = response.status_code
        if isinstance(response, h11.InformationalResponse):  # 101: a WebSocket, say
            await hop.switch(response, scrub)
            return False
        closing = not hop.keep_alive or _says_close(response)
        head = _response(response, closing=closing)
        if scrub is not None:
            has_body = request.method != b"HEAD" and response.status_code not in (204, 304)
            if has_body:
                _check_plain(response, target.host)
            headers = scrub.headers(list(head.headers), has_body=has_body)
            reason = scrub.replace(head.reason)
            head = h11.Response(status_code=head.status_code, headers=headers, reason=reason)
        await hop.to_client(conn.send(head))
        await hop.relay_response_body(scrub)
    except _ClientGone:
        return False
    except EgressError:
        if conn.our_state is h11.SEND_RESPONSE:
            raise  # nothing sent yet: the caller can still answer
        # The head is out; a broken body can only be reported by closing.
        return False
    finally:
        exchange.credential_ids = credential_ids(secrets.used)
    return hop.keep_alive and not closing and conn.our_state is h11.DONE


def end_to_end(headers: Headers) -> Headers:
    """``headers`` without hop-by-hop ones, including any the ``Connection`` header
    names (framing and ``Host`` excepted)."""
    named = {
        token.strip().lower()
        for name, value in headers
        if name == b"connection"
        for token in value.split(b",")
    }
    dropped = HOP_BY_HOP | (named - FRAMING)
    return [(name, value) for name, value in headers if name not in dropped]


def _request(target: Target, request: h11.Request, headers: Headers, *, close: bool) -> h11.Request:
    headers = [(b"host", target.authority), *(h for h in headers if h[0] != b"host")]
    if any(name == b"transfer-encoding" for name, _ in headers):
        # h11 read the body by its chunks; an origin that reads a Content-Length
        # sent beside them would take the rest of the body for a request of the
        # sandbox's own and the proxy's next request, credential and all, for its
        # body (RFC 9112 6.3: a proxy forwards such a message without it).
        headers = [h for h in headers if h[0] != b"content-length"]
    upgrade = _upgrade(request)
    if upgrade:
        headers += [(b"connection", b"upgrade"), *upgrade]
    elif close:
        headers.append((b"connection", b"close"))
    return h11.Request(method=request.method, target=target.path, headers=headers)


def _response(response: h11.Response, *, closing: bool) -> h11.Response:
    headers = end_to_end(list(response.headers))
    if closing:
        headers.append((b"connection", b"close"))
    return h11.Response(status_code=response.status_code, headers=headers, reason=response.reason)


def _upgrade(message: h11.Request | h11.InformationalResponse) -> Headers:
    """The ``Upgrade`` headers of a message that asks to switch protocols (the
    ``Connection`` header names ``upgrade``); hop-by-hop, so passed on by hand."""
    asks = any(
        name == b"connection" and b"upgrade" in value.lower() for name, value in message.headers
    )
    return [(n, v) for n, v in message.headers if n == b"upgrade"] if asks else []


def _says_close(response: h11.Response) -> bool:
    if response.http_version < b"1.1":
        return True
    return any(
        name == b"connection" and b"close" in value.lower() for name, value in response.headers
    )


class Bodies:
    """The request bodies one proxy reads whole to inject credentials into:
    each at most ``limit`` bytes, and all it holds at once at most ``held_limit``
    (before, a sandbox's 256 connections could each hold ``limit`` bytes of the
    host's memory). ``take`` counts bytes as they arrive; ``give`` returns them."""

    def __init__(self, limit: int, held_limit: int) -> None:
        self.limit = limit
        self.held_limit = held_limit
        self._held = 0

    @property
    def held(self) -> int:
        return self._held

    def take(self, size: int, host: str) -> None:
        if self._held + size > self.held_limit:
            raise Crowded(host, self.held_limit)
        self._held += size

    def give(self, size: int) -> None:
        self._held -= size

    @contextmanager
    def holding(self, host: str) -> Iterator[Callable[[int], None]]:
        """Counts one body's bytes as they arrive (``TooLarge`` past ``limit``)
        and gives them all back once it is sent on, or given up."""
        taken = 0

        def take(size: int) -> None:
            nonlocal taken
            if taken + size > self.limit:
                raise TooLarge(host, self.limit)
            self.take(size, host)
            taken += size

        try:
            yield take
        finally:
            self.give(taken)


def _plain(headers: Headers) -> Headers:
    """``headers`` asking for an answer that is not compressed: a compressed echo
    of an injected value would carry it past the scrubber."""
    return [*(h for h in headers if h[0] != b"accept-encoding"), (b"accept-encoding", b"identity")]


def _check_plain(response: h11.Response, host: str) -> None:
    """Refuses a compressed answer to a request that asked for none (``_plain``):
    the scrubber cannot see into it."""
    for name, value in response.headers:
        if name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
            raise UpstreamFailed(
                host, "the origin compressed an answer that must be scrubbed of credentials"
            )


def _sized(headers: Headers, length: int) -> Headers:
    kept = [(n, v) for n, v in headers if n not in (b"content-length", b"transfer-encoding")]
    return [*kept, (b"content-length", str(length).encode())]


class _Hop:
    """One request's two connections, with each side's failures mapped to its error."""

    def __init__(
        self,
        client: ByteStream,
        conn: h11.Connection,
        upstream: ByteStream,
        target: Target,
        idle_timeout: float,
        exchange: Exchange,
        origin: h11.Connection | None,
    ) -> None:
        self.client = client
        self.conn = conn
        self.upstream = upstream
        self.keep_alive = origin is not None
        self.origin = origin or h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.target = target
        self.where = f"{target.host}:{target.port}"
        self.idle = idle_timeout
        self.exchange = exchange

    async def send_request(
        self, request: h11.Request, secrets: HostSecrets, bodies: Bodies, *, plain: bool
    ) -> None:
        """``plain``: the answer will be scrubbed, so it is asked for uncompressed.
        A request that switches protocols (a WebSocket) gets no credential: what
        the origin sends after the switch cannot be scrubbed."""
        host = self.target.host
        given = end_to_end(list(request.headers))
        upgrade = bool(_upgrade(request))
        if upgrade:  # nothing injected, in the head or the body (streamed, watched)
            secrets.check_head(request.target, given, host)
            headers = given
        else:
            headers = secrets.head(request.target, given, host)
        if plain:
            headers = _plain(headers)
        close = not self.keep_alive
        if secrets.rewrites_body and not upgrade:
            with bodies.holding(host) as take:
                await self.send_continue()
                body = secrets.body(await self.read_body(take), host)
                framed = bool(body) or any(n in FRAMING - {b"host"} for n, _ in headers)
                if framed:
                    headers = _sized(headers, len(body))
                await self.to_upstream(self.origin.send(self._head(request, headers, close)))
                if body:
                    await self.to_upstream(self.origin.send(h11.Data(data=body)))
                await self.to_upstream(self.origin.send(h11.EndOfMessage()))
            return
        await self.to_upstream(self.origin.send(self._head(request, headers, close)))
        await self.send_continue()
        scan = _Scan(secrets, host)
        while True:
            event = await self.from_client()
            if isinstance(event, h11.Data):
                scan.feed(event.data)
                await self.to_upstream(self.origin.send(h11.Data(data=event.data)))
            elif isinstance(event, h11.EndOfMessage):
                await self.to_upstream(self.origin.send(h11.EndOfMessage()))
                return
            else:
                raise _ClientGone

    def _head(self, request: h11.Request, headers: Headers, close: bool) -> h11.Request:
        try:
            return _request(self.target, request, headers, close=close)
        except h11.LocalProtocolError:
            # An injected value a header cannot hold: h11's message quotes it.
            raise Unsendable(self.target.host) from None

    async def send_continue(self) -> None:
        if self.conn.they_are_waiting_for_100_continue:
            continue_ = h11.InformationalResponse(status_code=100, headers=[])
            await self.to_client(self.conn.send(continue_))

    async def read_body(self, take: Callable[[int], None]) -> bytes:
        """The whole body, each part counted by ``take`` as it arrives."""
        parts: list[bytes] = []
        while True:
            event = await self.from_client()
            if isinstance(event, h11.Data):
                take(len(event.data))
                parts.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            else:
                raise _ClientGone

    async def response_head(self) -> h11.Response | h11.InformationalResponse:
        """The response head, or a ``101 Switching Protocols``."""
        while True:
            event = await self.from_upstream()
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise UpstreamFailed(self.where, "the origin closed without answering")
            if event.status_code == 101:
                return event
            # 1xx: the client already had its 100 Continue from the proxy.

    async def switch(self, response: h11.InformationalResponse, scrub: Scrubber | None) -> None:
        """Passes the origin's ``101`` on and relays bytes both ways from then on
        (the request that asked for it carried no credential: ``send_request``)."""
        headers = [*end_to_end(list(response.headers)), *_upgrade(response)]
        if _upgrade(response):
            headers.append((b"connection", b"upgrade"))
        reason = response.reason
        if scrub is not None:
            headers = scrub.headers(headers, has_body=False)
            reason = scrub.replace(reason)
        switched = h11.InformationalResponse(status_code=101, headers=headers, reason=reason)
        await self.to_client(self.conn.send(switched))
        from_client, _ = self.conn.trailing_data
        from_origin, _ = self.origin.trailing_data
        await self.to_client(from_origin)
        await splice(self.client, self.upstream, idle_timeout=self.idle, a_to_b_first=from_client)

    async def relay_response_body(self, scrub: Scrubber | None) -> None:
        while True:
            event = await self.from_upstream()
            if isinstance(event, h11.Data):
                data = scrub.feed(event.data) if scrub is not None else event.data
                if data:
                    await self.to_client(self.conn.send(h11.Data(data=data)))
            elif isinstance(event, h11.EndOfMessage):
                rest = scrub.flush() if scrub is not None else b""
                if rest:
                    await self.to_client(self.conn.send(h11.Data(data=rest)))
                await self.to_client(self.conn.send(h11.EndOfMessage()))
                return
            else:
                raise UpstreamFailed(self.where, "the origin closed mid-response")

    async def from_client(self) -> h11.Event:
        try:
            return await _next_event(self.client, self.conn, self.idle)
        except h11.RemoteProtocolError as exc:
            raise BadRequest(str(exc), status=exc.error_status_hint) from None
        except (TimeoutError, *_GONE):
            raise _ClientGone from None

    async def from_upstream(self) -> h11.Event:
        try:
            return await _next_event(self.upstream, self.origin, self.idle)
        except TimeoutError:
            raise UpstreamTimeout(self.where, "the origin did not answer in time") from None
        except h11.RemoteProtocolError:
            raise UpstreamFailed(self.where, "the origin sent a malformed response") from None
        except _GONE:
            raise UpstreamFailed(self.where, "the origin broke the connection") from None

    async def to_client(self, data: bytes | None) -> None:
        if not data:
            return
        self.exchange.bytes_in += len(data)
        try:
            with anyio.fail_after(self.idle):
                await self.client.send(data)
        except (TimeoutError, *_GONE):
            raise _ClientGone from None

    async def to_upstream(self, data: bytes | None) -> None:
        if not data:
            return
        self.exchange.bytes_out += len(data)
        try:
            with anyio.fail_after(self.idle):
                await self.upstream.send(data)
        except TimeoutError:
            raise UpstreamTimeout(self.where, "the origin stopped reading") from None
        except _GONE:
            raise UpstreamFailed(self.where, "the origin broke the connection") from None


async def _next_event(stream: ByteStream, conn: h11.Connection, idle: float) -> h11.Event:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            assert isinstance(event, h11.Event), event  # PAUSED only follows CONNECT
            return event
        with anyio.fail_after(idle):
            await receive_into(stream, conn)


class _Scan:
    """Watches a streamed body for placeholders that may not go to its host; keeps
    the tail of each chunk so that one split across two chunks is seen."""

    def __init__(self, secrets: HostSecrets, host: str) -> None:
        self.secrets = secrets
        self.host = host
        self.keep = secrets.longest_placeholder() - 1
        self.tail = b""

    def feed(self, data: bytes) -> None:
        if not self.secrets.scans_body:
            return
        window = self.tail + data
        self.secrets.check(window, self.host)
        self.tail = window[-self.keep :] if self.keep > 0 else b""
