"""The egress rules for the brain's own MCP and OAuth traffic.

An MCP server or token endpoint is named by whoever defines an agent or a
credential, so the brain holds its connections to the rules the sandbox's
traffic keeps (``stead.egress_policy``): the policy's host check, one
resolution, the address blocklist, and a connection to an address that was
checked, never to the name again (DNS rebinding). TLS is verified for the name,
against the machine's CAs and the operator's extra bundle.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import httpx2

from stead.egress_policy import (
    Denied,
    EgressError,
    HostPolicy,
    checked_addresses,
    is_address,
    system_resolver,
)

ANSWER_MAX_BYTES = 32 * 1024 * 1024
"""The most of one answer (an MCP server's, a token endpoint's) the brain reads:
the model gets a few hundred KiB of a call's result at most, and a server that
sent a gigabyte would have had the brain hold all of it."""


@dataclass(frozen=True, slots=True)
class EgressRules:
    policy: HostPolicy
    tls: ssl.SSLContext
    pinned: Mapping[str, str] = field(default_factory=dict)
    """``STEAD_EGRESS_HOSTS``: names the operator pinned to addresses."""
    resolve_seconds: float = 10.0

    def transport(self) -> GuardedTransport:
        return GuardedTransport(self)


class GuardedTransport(httpx2.AsyncBaseTransport):
    """Sends each request to an address the rules checked for its host.

    One transport serves one operation (a call, a listing, a refresh), so its
    pooled connections never carry a request for another name."""

    def __init__(self, rules: EgressRules) -> None:
        self._rules = rules
        self._inner = httpx2.AsyncHTTPTransport(verify=rules.tls, trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        host = url.host
        port = url.port or (443 if url.scheme == "https" else 80)
        rules = self._rules
        try:
            addresses = await checked_addresses(
                host,
                port,
                rules.policy,
                resolver=system_resolver,
                resolve_seconds=rules.resolve_seconds,
                pinned=rules.pinned,
            )
        except Denied as exc:
            raise httpx2.ConnectError(f"stead's egress rules refuse {host}: {exc.reason}") from None
        except EgressError as exc:
            raise httpx2.ConnectError(str(exc)) from None
        extensions = dict(request.extensions)
        if url.scheme == "https" and not is_address(host):
            extensions["sni_hostname"] = host  # the certificate is checked for the name
        failure: httpx2.ConnectError | None = None
        for address in addresses:
            pinned = httpx2.Request(
                request.method,
                url.copy_with(host=address),
                headers=request.headers,  # keeps Host: the name, not the address
                stream=request.stream,
                extensions=extensions,
            )
            try:
                answer = await self._inner.handle_async_request(pinned)
            except httpx2.ConnectError as exc:
                failure = exc
                continue
            assert isinstance(answer.stream, httpx2.AsyncByteStream)
            answer.stream = CappedStream(answer.stream, ANSWER_MAX_BYTES)
            return answer
        assert failure is not None
        raise failure

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedStream(httpx2.AsyncByteStream):
    """An answer's body, refused (``httpx2.ReadError``) once past ``limit`` bytes."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._left = limit
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._left -= len(chunk)
            if self._left < 0:
                raise httpx2.ReadError(
                    f"the answer passed {self._limit // (1024 * 1024)} MiB; stead reads no more"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
