"""Forwarding one plain HTTP request to its origin and streaming the answer back.

The request goes out in origin form (``GET /path?q``) with ``Host`` set to the
URL's authority (so a client cannot reach another virtual host behind an allowed
address), hop-by-hop headers removed and ``Connection: close``: one request per
connection keeps the proxy simple. h11 frames both sides, so bodies stream in
chunks and are never buffered whole. Works on any byte streams: the same code
can serve requests decrypted from a CONNECT tunnel.

Errors before the response head reaches the client are raised as
``UpstreamFailed``/``UpstreamTimeout`` (the caller answers 502/504) or
``BadRequest``; after it, the only signal left is closing the connection.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import h11
from anyio.abc import ByteStream

from stead.sandbox_host.egress.errors import (
    BadRequest,
    EgressError,
    UpstreamFailed,
    UpstreamTimeout,
)
from stead.sandbox_host.egress.request import MAX_HEAD_BYTES, Target, receive_into

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
    inject: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """Sends ``request`` (its body still unread on ``client``/``conn``) to ``upstream``
    and relays the response. Each read and write waits at most ``idle_timeout``.
    Does not close either stream."""
    hop = _Hop(client, conn, upstream, f"{target.host}:{target.port}", idle_timeout)
    try:
        await hop.send_request(request, target, inject)
        response = await hop.response_head()
        await hop.to_client(conn.send(_response(response)))
        await hop.relay_response_body()
    except _ClientGone:
        return
    except EgressError:
        if conn.our_state is h11.SEND_RESPONSE:
            raise  # nothing sent yet: the caller can still answer
        # The head is out; a broken body can only be reported by closing.


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


def _request(
    request: h11.Request, target: Target, inject: Sequence[tuple[bytes, bytes]]
) -> h11.Request:
    replaced = {b"host"} | {name for name, _ in inject}
    headers = [(n, v) for n, v in end_to_end(list(request.headers)) if n not in replaced]
    headers = [(b"host", target.authority), *headers, *inject, (b"connection", b"close")]
    return h11.Request(method=request.method, target=target.path, headers=headers)


def _response(response: h11.Response) -> h11.Response:
    headers = [*end_to_end(list(response.headers)), (b"connection", b"close")]
    return h11.Response(status_code=response.status_code, headers=headers, reason=response.reason)


class _Hop:
    """One request's two connections, with each side's failures mapped to its error."""

    def __init__(
        self,
        client: ByteStream,
        conn: h11.Connection,
        upstream: ByteStream,
        where: str,
        idle_timeout: float,
    ) -> None:
        self.client = client
        self.conn = conn
        self.upstream = upstream
        self.origin = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.where = where
        self.idle = idle_timeout

    async def send_request(
        self, request: h11.Request, target: Target, inject: Sequence[tuple[bytes, bytes]]
    ) -> None:
        await self.to_upstream(self.origin.send(_request(request, target, inject)))
        if self.conn.they_are_waiting_for_100_continue:
            continue_ = h11.InformationalResponse(status_code=100, headers=[])
            await self.to_client(self.conn.send(continue_))
        while True:
            event = await self.from_client()
            if isinstance(event, h11.Data):
                await self.to_upstream(self.origin.send(h11.Data(data=event.data)))
            elif isinstance(event, h11.EndOfMessage):
                await self.to_upstream(self.origin.send(h11.EndOfMessage()))
                return
            else:
                raise _ClientGone

    async def response_head(self) -> h11.Response:
        while True:
            event = await self.from_upstream()
            if isinstance(event, h11.Response):
                return event
            if not isinstance(event, h11.InformationalResponse):
                raise UpstreamFailed(self.where, "the origin closed without answering")
            # 1xx: the client already had its 100 Continue from the proxy.

    async def relay_response_body(self) -> None:
        while True:
            event = await self.from_upstream()
            if isinstance(event, h11.Data):
                await self.to_client(self.conn.send(h11.Data(data=event.data)))
            elif isinstance(event, h11.EndOfMessage):
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
        try:
            with anyio.fail_after(self.idle):
                await self.client.send(data)
        except (TimeoutError, *_GONE):
            raise _ClientGone from None

    async def to_upstream(self, data: bytes | None) -> None:
        if not data:
            return
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
