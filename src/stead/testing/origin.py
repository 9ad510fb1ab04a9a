"""A tiny HTTP/1.1 origin for egress tests and benchmarks: serves one
connection (plain or TLS), keeping it alive, and answers every request with
what ``respond`` returns for it. Never echoes anything by itself: an origin
that echoed headers would carry an injected secret back into a sandbox."""

from __future__ import annotations

import ssl
from collections.abc import Callable

import anyio
import h11
from anyio.abc import ByteStream

Respond = Callable[[h11.Request, bytes], bytes]
"""(request head, request body) -> the response body (status 200)."""

_GONE = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, ssl.SSLError)


async def serve_origin(stream: ByteStream, respond: Respond) -> None:
    """Serves requests on ``stream`` until the client closes it; closes it."""
    conn = h11.Connection(h11.SERVER)
    request: h11.Request | None = None
    body = b""
    async with stream:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    conn.receive_data(await stream.receive())
                except _GONE:
                    return
            elif isinstance(event, h11.Request):
                request, body = event, b""
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage) and request is not None:
                data = respond(request, body)
                head = h11.Response(status_code=200, headers=[("content-length", str(len(data)))])
                out = (
                    conn.send(head) + conn.send(h11.Data(data=data)) + conn.send(h11.EndOfMessage())
                )
                await stream.send(out)
                conn.start_next_cycle()
            else:
                return
