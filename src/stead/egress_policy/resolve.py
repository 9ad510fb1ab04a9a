"""From a host name to the addresses a connection may use: the policy's host
check, one resolution, the address check. Callers connect to the addresses
returned, never to the name: a second lookup could answer differently (DNS
rebinding) and walk past the blocklist.

``STEAD_EGRESS_HOSTS`` pins names to addresses (like ``/etc/hosts``): a pinned
name is not resolved, and its address passes the blocklist, since the operator
chose it; the policy must still allow the name.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

import anyio
from anyio import to_thread

from stead.egress_policy.errors import UpstreamFailed, UpstreamTimeout
from stead.egress_policy.policy import normalize_host

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``(host, port) -> IP addresses``; raises ``OSError`` when the name does not resolve."""

_PINNED_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?$")


class HostPolicy(Protocol):
    """What ``checked_addresses`` asks of a policy (``EgressPolicy``, ``DomainPolicy``)."""

    def check_host(self, host: str) -> None: ...

    def check_addresses(self, host: str, addresses: Sequence[str]) -> None: ...


async def system_resolver(host: str, port: int) -> list[str]:
    """The machine's resolver (``getaddrinfo``), as addresses in the order it gave them."""
    infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


Lookup = Callable[[str, int], Sequence[tuple[Any, ...]]]
"""A blocking ``getaddrinfo`` for stream sockets."""


def _getaddrinfo(host: str, port: int) -> Sequence[tuple[Any, ...]]:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


def threaded_resolver(limiter: anyio.CapacityLimiter, lookup: Lookup = _getaddrinfo) -> Resolver:
    """``getaddrinfo`` on threads of its own, at most ``limiter``'s at once. The
    event loop's resolver runs on a pool of four threads that every caller
    shares: names that never resolve (their DNS server never answers) held it,
    and every other lookup waited. A lookup given up on keeps its thread, and
    its place in ``limiter``, until the system's resolver gives up too."""

    async def resolve(host: str, port: int) -> list[str]:
        infos = await to_thread.run_sync(
            lookup, host, port, abandon_on_cancel=True, limiter=limiter
        )
        return [str(info[4][0]) for info in infos]

    return resolve


def pinned_hosts(hosts: Mapping[str, str]) -> dict[str, str]:
    """``STEAD_EGRESS_HOSTS`` checked: normalised names to canonical addresses.
    Raises ``ValueError`` naming the first bad entry."""
    checked = {}
    for name, address in hosts.items():
        host = normalize_host(name)
        if not _PINNED_NAME.match(host):
            raise ValueError(f"{name!r} is not a host name")
        try:
            checked[host] = str(ipaddress.ip_address(address))
        except ValueError:
            raise ValueError(f"{name!r}: {address!r} is not an IP address") from None
    return checked


async def checked_addresses(
    host: str,
    port: int,
    policy: HostPolicy,
    *,
    resolver: Resolver,
    resolve_seconds: float,
    pinned: Mapping[str, str] | None = None,
) -> list[str]:
    """The addresses a connection to ``host:port`` may use, in order.

    Raises ``Denied`` (policy or blocklist), ``UpstreamFailed`` (no such name)
    or ``UpstreamTimeout`` (resolving took ``resolve_seconds``).
    """
    policy.check_host(host)
    address = (pinned or {}).get(normalize_host(host))
    if address is not None:
        return [address]
    addresses = await _resolve(host, port, resolver, resolve_seconds)
    policy.check_addresses(host, addresses)
    return addresses


async def _resolve(host: str, port: int, resolver: Resolver, seconds: float) -> list[str]:
    try:
        return [str(ipaddress.ip_address(normalize_host(host)))]
    except ValueError:
        pass
    try:
        with anyio.fail_after(seconds):
            found = await resolver(host, port)
    except TimeoutError:
        raise UpstreamTimeout(host, "resolving the host timed out") from None
    except OSError:
        raise UpstreamFailed(host, "cannot resolve the host") from None
    except UnicodeError:  # the name has no IDNA form, so no DNS name
        raise UpstreamFailed(host, "not a valid host name") from None
    try:
        addresses = list(dict.fromkeys(str(ipaddress.ip_address(a)) for a in found))
    except ValueError:
        raise UpstreamFailed(host, "the resolver returned a non-address") from None
    if not addresses:
        raise UpstreamFailed(host, "the host has no addresses")
    return addresses
