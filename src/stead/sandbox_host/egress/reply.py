"""Short error answers to a proxy client, written so that a client that is gone or
not reading never holds the proxy up."""

from __future__ import annotations

from http import HTTPStatus

import anyio
from anyio.abc import ByteStream

_GONE = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError)


async def answer(client: ByteStream, status: int, text: str, seconds: float) -> None:
    """Sends a short ``text/plain`` error response that closes the connection; a
    client that is gone or not reading is left alone (the caller closes next)."""
    body = (text + "\n").encode("utf-8", "replace")
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    await send_quietly(client, head.encode() + body, seconds)


async def send_quietly(client: ByteStream, data: bytes, seconds: float) -> bool:
    """Whether ``data`` was sent within ``seconds``."""
    with anyio.move_on_after(seconds):
        try:
            await client.send(data)
        except _GONE:
            return False
        return True
    return False
