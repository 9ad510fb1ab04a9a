"""Where a webhook may be delivered, and the delivery's one HTTP exchange, under
stead's egress rules (``stead.egress_policy``): a receiver's addresses must be
publicly routable unless the operator pinned its name (``STEAD_EGRESS_HOSTS``);
plain ``http://`` only to such a pinned name. The connection goes to the
address that was checked, never to the name again (DNS rebinding), and TLS is
verified for the name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

from stead.egress_policy import (
    Denied,
    EgressError,
    UpstreamTls,
    checked_addresses,
    is_address,
    normalize_host,
    refuse_blocked,
    system_resolver,
)
from stead.schemas import RequestError
from stead.store import AttemptResult

RESOLVE_SECONDS = 5.0
USER_AGENT = "stead-webhooks"


class PublicAddresses:
    """Any host name, but only publicly routable addresses (the ``HostPolicy`` the
    delivery resolves under; pinned names skip the address check)."""

    def check_host(self, host: str) -> None:
        return None

    def check_addresses(self, host: str, addresses: Sequence[str]) -> None:
        refuse_blocked(host, addresses)


@dataclass(frozen=True, slots=True)
class WebhookEgress:
    pinned: Mapping[str, str]
    """``STEAD_EGRESS_HOSTS``: names the operator allows at the addresses given."""
    tls: UpstreamTls
    timeout_seconds: float

    async def check_target(self, url: str) -> None:
        """Raises ``RequestError`` (a 400 naming ``url``) when stead would refuse to
        deliver to ``url``. A name that does not resolve yet is accepted: the
        receiver may come later, and every attempt records why it failed."""
        import httpx2

        try:
            httpx2.URL(url)  # what delivery will parse it with
        except (httpx2.InvalidURL, ValueError) as exc:
            raise RequestError(f"url: not a URL stead can deliver to ({exc})") from None
        parts = urlsplit(url)
        host = parts.hostname or ""
        pinned = normalize_host(host) in self.pinned
        if parts.scheme == "http" and not pinned:
            raise RequestError(
                f"url: http:// is allowed only to a host the operator pinned in "
                f"STEAD_EGRESS_HOSTS; use https:// for {host}"
            )
        try:
            await self._addresses(host, parts.port or 443)
        except Denied as exc:
            raise RequestError(f"url: stead's egress rules refuse {host}: {exc.reason}") from None
        except EgressError:
            return

    async def _addresses(self, host: str, port: int) -> list[str]:
        return await checked_addresses(
            host,
            port,
            PublicAddresses(),
            resolver=system_resolver,
            resolve_seconds=RESOLVE_SECONDS,
            pinned=self.pinned,
        )

    async def post(self, url: str, headers: Mapping[str, str], body: str) -> AttemptResult:
        """POSTs ``body`` to ``url``; the whole exchange is bounded by the timeout.
        Never raises for the receiver's failures: they are the result."""
        import httpx2  # at the first delivery: a server with no webhooks loads none of it

        try:
            with anyio.fail_after(self.timeout_seconds):
                status = await self._post(url, headers, body)
        except TimeoutError:
            return AttemptResult(None, f"no answer within {self.timeout_seconds:g} s")
        except Denied as exc:
            return AttemptResult(None, f"refused by stead's egress rules: {exc.reason}")
        except EgressError as exc:
            return AttemptResult(None, str(exc))
        except (httpx2.HTTPError, httpx2.InvalidURL, ValueError) as exc:
            # A URL stored before registration checked what delivery parses
            # fails each attempt, never the courier.
            return AttemptResult(None, f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc))
        error = None if 200 <= status < 300 else f"the receiver answered {status}"
        return AttemptResult(status, error)

    async def _post(self, url: str, headers: Mapping[str, str], body: str) -> int:
        import httpx2

        target = httpx2.URL(url)
        port = target.port or (443 if target.scheme == "https" else 80)
        addresses = await self._addresses(target.host, port)
        extensions: dict[str, object] = {}
        if target.scheme == "https" and not is_address(target.host):
            extensions["sni_hostname"] = target.host  # the certificate is checked for the name
        sent = {
            **headers,
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "host": target.netloc.decode(),
        }
        failure: httpx2.ConnectError | None = None
        # A transport per delivery: its pool never carries a request for another name.
        async with httpx2.AsyncHTTPTransport(
            verify=self.tls.context(), trust_env=False
        ) as transport:
            for address in addresses:
                request = httpx2.Request(
                    "POST",
                    target.copy_with(host=address),
                    headers=sent,
                    content=body.encode(),
                    extensions=extensions,
                )
                try:
                    response = await transport.handle_async_request(request)
                except httpx2.ConnectError as exc:
                    failure = exc
                    continue
                await response.aclose()
                return response.status_code
        assert failure is not None
        raise failure
