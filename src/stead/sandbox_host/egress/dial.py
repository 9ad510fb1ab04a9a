"""Opening the upstream side of a request: policy, one resolution, address check, connect.

The name is resolved exactly once and the proxy connects to the addresses it
checked, never to the name: a second lookup could answer differently (DNS
rebinding) and walk past the blocklist.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence

import anyio
from anyio.abc import SocketStream

from stead.sandbox_host.egress.errors import UpstreamFailed, UpstreamTimeout
from stead.sandbox_host.egress.policy import EgressPolicy, normalize_host

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``(host, port) -> IP addresses``; raises ``OSError`` when the name does not resolve."""


async def system_resolver(host: str, port: int) -> list[str]:
    """The machine's resolver (``getaddrinfo``), as addresses in the order it gave them."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


async def dial(
    host: str,
    port: int,
    policy: EgressPolicy,
    *,
    resolver: Resolver,
    connect_timeout: float,
    pinned: Mapping[str, str] | None = None,
) -> SocketStream:
    """A connection to ``host:port`` that the policy allows.

    Raises ``Denied`` (policy or blocklist), ``UpstreamFailed`` (no such name, every
    address refused) or ``UpstreamTimeout``; resolving and connecting each get
    ``connect_timeout`` seconds. Cancellation leaves nothing open. A ``pinned``
    name (the operator's ``STEAD_EGRESS_HOSTS``) goes to its address without
    resolving, and that address passes the blocklist: the operator chose it.
    """
    policy.check_host(host)
    address = (pinned or {}).get(normalize_host(host))
    if address is not None:
        return await _connect(host, port, [address], connect_timeout)
    addresses = await _resolve(host, port, resolver, connect_timeout)
    policy.check_addresses(host, addresses)
    return await _connect(host, port, addresses, connect_timeout)


async def _resolve(host: str, port: int, resolver: Resolver, seconds: float) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        with anyio.fail_after(seconds):
            found = await resolver(host, port)
    except TimeoutError:
        raise UpstreamTimeout(host, "resolving the host timed out") from None
    except OSError:
        raise UpstreamFailed(host, "cannot resolve the host") from None
    try:
        addresses = list(dict.fromkeys(str(ipaddress.ip_address(a)) for a in found))
    except ValueError:
        raise UpstreamFailed(host, "the resolver returned a non-address") from None
    if not addresses:
        raise UpstreamFailed(host, "the host has no addresses")
    return addresses


async def _connect(host: str, port: int, addresses: list[str], seconds: float) -> SocketStream:
    failure = "no address to try"
    try:
        with anyio.fail_after(seconds):
            for address in addresses:
                try:
                    return await anyio.connect_tcp(address, port)
                except OSError as exc:
                    failure = exc.strerror or str(exc) or type(exc).__name__
    except TimeoutError:
        raise UpstreamTimeout(f"{host}:{port}", "connecting timed out") from None
    raise UpstreamFailed(f"{host}:{port}", f"cannot connect: {failure}")
