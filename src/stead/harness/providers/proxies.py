"""The proxy a model upstream is reached through, as the proxy variables name it
(``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, read as urllib
reads them), and the tunnels through it.

* ``http://`` and ``https://`` (TLS to the proxy itself, verified with the
  upstream's trust): an https upstream is reached through a ``CONNECT``
  tunnel, a plain one by sending the proxy the whole URL;
  ``user:password@`` becomes ``Proxy-Authorization: Basic``.
* ``socks5://`` (names resolved here) and ``socks5h://`` (by the proxy), RFC
  1928, with RFC 1929's user name and password when the URL has them: the
  tunnel reaches the upstream, which is then spoken to as if direct.

What the SDK's own transport does, which stead's client replaces (``upstream.py``):
a server that ran the SDK behind one of these proxies runs stead behind it.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
import struct
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote, urlsplit
from urllib.request import getproxies_environment, proxy_bypass

DEFAULT_PORTS = {"http": 80, "https": 443, "socks5": 1080, "socks5h": 1080}
MAX_TUNNEL_ANSWER = 16 * 1024
"""The most a proxy's answer to ``CONNECT`` may take before its blank line."""
SOCKS_REPLIES = {
    1: "general failure",
    2: "not allowed by its rules",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}
"""RFC 1928's reply codes: why a SOCKS proxy did not connect."""


class ProxyError(Exception):
    """The proxy cannot be used, or did not open the tunnel; the text says why."""


@dataclass(frozen=True)
class Proxy:
    scheme: str
    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def forwards_http(self) -> bool:
        """An HTTP proxy (``http://``, ``https://``): ``CONNECT`` for a tunnel, the
        whole URL for plain HTTP; else SOCKS, always a tunnel."""
        return self.scheme in ("http", "https")

    @property
    def tls(self) -> bool:
        """Spoken to over TLS itself."""
        return self.scheme == "https"

    @property
    def authorization(self) -> str | None:
        """``Proxy-Authorization`` for an HTTP proxy with credentials."""
        if self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}"
        return "Basic " + base64.b64encode(pair.encode()).decode()

    def __str__(self) -> str:
        return f"the proxy {self.host}:{self.port}"


def proxy_for(scheme: str, host: str) -> Proxy | None:
    """The proxy the environment names for ``scheme://host``, if any and not
    bypassed; ``ProxyError`` when it names one stead cannot use."""
    proxies = getproxies_environment()
    url = proxies.get(scheme) or proxies.get("all")
    if not url or proxy_bypass(host):
        return None
    whole = url if "://" in url else f"http://{url}"
    parts = urlsplit(whole)
    kind = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    # Credentials with a bare "/", "?" or "#" end the URL's authority early:
    # the host parsed is then part of them.
    after = whole.partition("://")[2]
    garbled = "@" in after and parts.username is None
    if kind not in DEFAULT_PORTS or not parts.hostname or port == -1 or garbled:
        # Named without its credentials, whatever they hold: the text reaches the session.
        shown = f"{kind}://{after.rpartition('@')[2]}"
        raise ProxyError(
            f"the {scheme} proxy {shown!r}: only an http://, https://, socks5:// or "
            "socks5h:// proxy with a host, a valid port and percent-encoded "
            "credentials is supported"
        )
    return Proxy(
        kind,
        parts.hostname,
        port or DEFAULT_PORTS[kind],
        None if parts.username is None else unquote(parts.username),
        None if parts.password is None else unquote(parts.password),
    )


class RawConnection(Protocol):
    """A connection read byte by byte while a tunnel opens (``upstream._Connection``)."""

    transport: asyncio.Transport | None
    raw: bytearray | None
    lost: bool

    async def wait(self, seconds: float) -> None: ...


async def http_tunnel(
    connection: RawConnection, proxy: Proxy, authority: str, seconds: float
) -> None:
    """``CONNECT authority`` through an HTTP proxy; returns once it answered 2xx."""
    lines = [f"CONNECT {authority} HTTP/1.1", f"host: {authority}"]
    if proxy.authorization:
        lines.append(f"proxy-authorization: {proxy.authorization}")
    connection.raw = bytearray()
    _write(connection, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    while b"\r\n\r\n" not in connection.raw:
        if len(connection.raw) > MAX_TUNNEL_ANSWER:
            raise ProxyError(f"the proxy's answer to CONNECT passed {MAX_TUNNEL_ANSWER} bytes")
        await _more(connection, seconds)
    head, _, rest = bytes(connection.raw).partition(b"\r\n\r\n")
    connection.raw = None
    status = head.split(b"\r\n", 1)[0].decode("latin-1")
    code = status.split(" ", 2)[1] if status.count(" ") else ""
    if not (code.isascii() and code.isdigit() and 200 <= int(code) < 300) or rest:
        raise ProxyError(f"the proxy refused the tunnel: {status[:200]}")


async def socks_tunnel(
    connection: RawConnection, proxy: Proxy, host: str, port: int, seconds: float
) -> None:
    """RFC 1928's ``CONNECT`` to ``host:port`` through a SOCKS5 proxy."""
    login = None
    if proxy.username is not None:
        user, password = proxy.username.encode(), (proxy.password or "").encode()
        if not (0 < len(user) < 256 and 0 < len(password) < 256):
            raise ProxyError(f"{proxy}: a SOCKS user name and password are 1 to 255 bytes")
        login = bytes([len(user)]) + user + bytes([len(password)]) + password
    connection.raw = bytearray()
    methods = b"\x00\x02" if login is not None else b"\x00"
    _write(connection, b"\x05" + bytes([len(methods)]) + methods)
    version, method = await _take(connection, 2, seconds)
    if version != 5:
        raise ProxyError(f"{proxy} does not speak SOCKS5")
    if method == 2 and login is not None:
        _write(connection, b"\x01" + login)
        if await _take(connection, 2, seconds) != b"\x01\x00":
            raise ProxyError(f"{proxy} refused the user name and password")
    elif method != 0:
        raise ProxyError(f"{proxy} accepts none of the ways stead can authenticate")
    address = await _socks_address(proxy, host, port)
    _write(connection, b"\x05\x01\x00" + address + struct.pack("!H", port))
    version, reply, _, kind = await _take(connection, 4, seconds)
    if version != 5:
        raise ProxyError(f"{proxy} does not speak SOCKS5")
    if reply != 0:
        why = SOCKS_REPLIES.get(reply, f"reply {reply}")
        raise ProxyError(f"{proxy} did not connect to {host}:{port}: {why}")
    # The address it bound, of no use here: an IP, or a name after its length.
    if kind not in (1, 3, 4):
        raise ProxyError(f"{proxy} answered with an unknown address type {kind}")
    size = {1: 4, 4: 16}.get(kind) or (await _take(connection, 1, seconds))[0]
    await _take(connection, size + 2, seconds)
    if connection.raw:
        raise ProxyError(f"{proxy} sent past its answer")
    connection.raw = None


async def _socks_address(proxy: Proxy, host: str, port: int) -> bytes:
    """The destination as the request carries it: an address, or for
    ``socks5h`` a name the proxy resolves."""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        if proxy.scheme == "socks5h":
            return _socks_name(host)
        literal = await _resolved(host, port)
    return (b"\x01" if literal.version == 4 else b"\x04") + literal.packed


async def _resolved(host: str, port: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise ProxyError(f"cannot resolve {host}: {exc}") from None
    if not found:
        raise ProxyError(f"cannot resolve {host}: no address")
    return ipaddress.ip_address(found[0][4][0])


def _socks_name(host: str) -> bytes:
    try:
        name = host.encode("idna")
    except UnicodeError as exc:
        raise ProxyError(f"{host[:80]!r} is not a name a proxy can resolve: {exc}") from None
    if len(name) > 255:
        raise ProxyError(f"{host[:80]!r}...: a name a proxy resolves is at most 255 bytes")
    return b"\x03" + bytes([len(name)]) + name


def _write(connection: RawConnection, data: bytes) -> None:
    assert connection.transport is not None
    connection.transport.write(data)


async def _take(connection: RawConnection, size: int, seconds: float) -> bytes:
    assert connection.raw is not None
    while len(connection.raw) < size:
        await _more(connection, seconds)
    taken = bytes(connection.raw[:size])
    del connection.raw[:size]
    return taken


async def _more(connection: RawConnection, seconds: float) -> None:
    if connection.lost:
        raise ProxyError("the proxy closed the connection before its answer")
    await connection.wait(seconds)
