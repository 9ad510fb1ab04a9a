"""Opening the upstream side of a request: policy, one resolution, address check
(``stead.egress_policy.checked_addresses``), then a connection to the checked
addresses, never to the name (DNS rebinding)."""

from __future__ import annotations

from collections.abc import Mapping

import anyio
from anyio.abc import SocketStream

from stead.egress_policy import (
    EgressPolicy,
    Resolver,
    UpstreamFailed,
    UpstreamTimeout,
    checked_addresses,
)


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
    addresses = await checked_addresses(
        host, port, policy, resolver=resolver, resolve_seconds=connect_timeout, pinned=pinned
    )
    return await _connect(host, port, addresses, connect_timeout)


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
