"""Reading one proxy request head from an untrusted client, and what it asks for.

The head is parsed by h11 with a bounded buffer (``MAX_HEAD_BYTES``); the caller
bounds the time. Two forms are accepted: ``CONNECT host:port`` (authority form)
and an absolute-form ``http://`` request. Everything else is a ``BadRequest``.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import Enum

import anyio
import h11
from anyio.abc import ByteStream

from stead.sandbox_host.egress.errors import BadRequest

MAX_HEAD_BYTES = 64 * 1024
"""Largest request or response head the proxy buffers."""

READ_CHUNK = 64 * 1024

_HOST_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,253}$")


class Kind(Enum):
    CONNECT = "connect"
    FORWARD = "forward"


@dataclass(frozen=True)
class Target:
    """Where a request goes: ``host`` as the client spelled it (brackets removed from an
    IPv6 address), ``port``, and for ``FORWARD`` the origin-form target and the
    ``Host`` header value to send."""

    kind: Kind
    host: str
    port: int
    path: bytes = b""
    authority: bytes = b""


async def read_request(stream: ByteStream, conn: h11.Connection) -> h11.Request | None:
    """The next request head on ``stream``; None if the client closed before sending
    one. Raises ``BadRequest`` for anything h11 rejects, including a head larger than
    the connection's ``max_incomplete_event_size``. The caller bounds the time."""
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise BadRequest(str(exc), status=exc.error_status_hint) from None
        if isinstance(event, h11.Request):
            return event
        if isinstance(event, h11.ConnectionClosed):
            return None
        if event is not h11.NEED_DATA:  # pragma: no cover - h11 yields nothing else here
            raise BadRequest(f"unexpected {type(event).__name__}")
        await receive_into(stream, conn)


async def receive_into(stream: ByteStream, conn: h11.Connection) -> None:
    """Feeds ``conn`` the next chunk from ``stream`` (b"" at end of stream)."""
    try:
        data = await stream.receive(READ_CHUNK)
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        data = b""
    conn.receive_data(data)


def parse_target(request: h11.Request) -> Target:
    """What ``request`` asks the proxy to reach; raises ``BadRequest``."""
    if request.method == b"CONNECT":
        host, port = _authority(request.target, default_port=None)
        return Target(Kind.CONNECT, host, port)
    target = request.target
    if target[:7].lower() != b"http://":
        if target[:8].lower() == b"https://":
            raise BadRequest("use CONNECT for https:// URLs")
        raise BadRequest("expected an absolute http:// URL or CONNECT host:port")
    rest = target[7:]
    end = min((i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0), default=len(rest))
    authority, path = rest[:end], rest[end:]
    if b"@" in authority:
        raise BadRequest("user information in the URL is not supported")
    host, port = _authority(authority, default_port=80)
    if not path.startswith(b"/"):
        path = b"/" + path
    return Target(Kind.FORWARD, host, port, path=path, authority=authority)


def _authority(raw: bytes, *, default_port: int | None) -> tuple[str, int]:
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise BadRequest("the host is not ASCII") from None
    host, port_text = _split_port(text)
    if port_text is None:
        if default_port is None:
            raise BadRequest(f"{_shown(text)}: CONNECT needs host:port")
        port = default_port
    elif port_text.isdigit() and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise BadRequest(f"{_shown(text)}: bad port")
    if not _valid_host(host):
        raise BadRequest(f"{_shown(text)}: bad host")
    return host, port


def _split_port(text: str) -> tuple[str, str | None]:
    if text.startswith("["):
        close = text.find("]")
        if close < 0:
            raise BadRequest(f"{_shown(text)}: unclosed [")
        host, after = text[1:close], text[close + 1 :]
        if not after:
            return host, None
        if not after.startswith(":"):
            raise BadRequest(f"{_shown(text)}: bad host")
        return host, after[1:]
    host, colon, port = text.rpartition(":")
    return (host, port) if colon else (text, None)


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(_HOST_NAME.match(host)) and not host.startswith(".")
    return True


def _shown(text: str) -> str:
    """Client text as it may appear in a response body: bounded."""
    return text if len(text) <= 100 else text[:100] + "..."
