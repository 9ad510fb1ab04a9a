"""One HTTP(S) GET on the model's behalf, under the egress rules.

Every hop (the URL, then each redirect, at most ``MAX_REDIRECTS``) is checked
against the tool's ``DomainPolicy`` and the session's credentials, its host is
resolved once (``checked_addresses``: pins, blocklist) and the request goes to
a checked address, never to the name, so a second lookup cannot rebind it.
The name still travels as the ``Host`` header and the TLS server name, and the
origin's certificate is verified for it. No connection is reused: a pooled
connection to one address could otherwise carry a request for another name.
The whole call, redirects included, ends after ``WebOptions.timeout``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from stead.egress_policy import EgressError, HostPolicy, checked_addresses, is_address
from stead.tools.web.errors import WebError
from stead.tools.web.guard import CredentialGuard
from stead.tools.web.options import WebOptions

if TYPE_CHECKING:
    import httpx2

MAX_REDIRECTS = 10
USER_AGENT = "stead-web-fetch/1 (an AI agent's web_fetch tool)"
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,application/pdf;q=0.8,*/*;q=0.5"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str
    """The URL that answered (after redirects)."""
    requested: str
    content_type: str
    """The media type, lower case, without parameters; "" when none was sent."""
    charset: str | None
    body: bytes
    truncated: bool
    """The body was longer than ``WebOptions.max_bytes`` and was cut there."""


@dataclass(frozen=True, slots=True)
class _Target:
    url: httpx2.URL
    host: str
    """ASCII (IDNA) host, without brackets."""
    port: int


async def fetch(
    url: str, policy: HostPolicy, options: WebOptions, guard: CredentialGuard
) -> Fetched:
    """GETs ``url``; raises ``WebError`` for anything that keeps it from a 2xx body."""
    import httpx2  # at first use: a server that never fetches loads none of it

    try:
        with anyio.fail_after(options.timeout):
            return await _follow(url, policy, options, guard)
    except TimeoutError:
        raise WebError(f"{url}: no complete answer within {options.timeout:g} s") from None
    except httpx2.TimeoutException:
        raise WebError(f"{url}: the origin took too long to answer") from None
    except EgressError as exc:
        raise WebError(str(exc)) from None
    except httpx2.HTTPError as exc:
        raise WebError(f"{url}: the connection failed: {_reason(exc)}") from None
    except httpx2.InvalidURL as exc:  # not an HTTPError
        raise WebError(f"{url}: not a URL it can fetch: {_reason(exc)}") from None


async def _follow(
    url: str, policy: HostPolicy, options: WebOptions, guard: CredentialGuard
) -> Fetched:
    async with _client(options) as client:
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            target = parse_target(current)
            guard.check(current, target.host, "the URL")
            addresses = await checked_addresses(
                target.host,
                target.port,
                policy,
                resolver=options.resolver,
                resolve_seconds=options.timeout,
                pinned=options.pinned,
            )
            async with _opened(client, target, addresses) as response:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location:
                    current = _redirected(target, location)
                    continue
                if response.status_code >= 400:
                    phrase = response.reason_phrase
                    raise WebError(f"{current} answered HTTP {response.status_code} {phrase}")
                if response.status_code >= 300:
                    raise WebError(f"{current} answered HTTP {response.status_code} without a body")
                body, truncated = await _read(response, options.max_bytes)
                media, charset = _content_type(response.headers.get("content-type", ""))
                return Fetched(current, url, media, charset, body, truncated)
        raise WebError(f"{url}: more than {MAX_REDIRECTS} redirects")


def _redirected(target: _Target, location: str) -> str:
    """The URL a redirect's ``Location`` names; ``WebError`` when it names none
    (httpx's ``InvalidURL`` is no ``HTTPError``: it would escape the tool)."""
    import httpx2

    try:
        return str(target.url.join(location))
    except httpx2.InvalidURL:
        raise WebError(f"{target.url} redirected to {location[:300]!r}, not a valid URL") from None


def parse_target(url: str) -> _Target:
    """An absolute http(s) URL without user info; ``WebError`` otherwise."""
    import httpx2

    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError):
        raise WebError(f"{url!r} is not a valid URL") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise WebError(f"{url!r} is not an absolute http:// or https:// URL")
    if parsed.userinfo:
        raise WebError("a URL with a user name or password is not fetched")
    host = parsed.raw_host.decode("ascii")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return _Target(parsed, host, port)


def _client(options: WebOptions) -> httpx2.AsyncClient:
    import httpx2

    return httpx2.AsyncClient(
        verify=options.tls,
        trust_env=False,  # no proxy, netrc or CA variables of the brain's environment
        follow_redirects=False,
        timeout=httpx2.Timeout(options.timeout),
        limits=httpx2.Limits(max_keepalive_connections=0),
    )


@asynccontextmanager
async def _opened(
    client: httpx2.AsyncClient, target: _Target, addresses: list[str]
) -> AsyncIterator[httpx2.Response]:
    """The response of the first checked address that takes the connection."""
    import httpx2

    failure = "no address to try"
    for address in addresses:
        request = _request(client, target, address)
        try:
            response = await client.send(request, stream=True)
        except httpx2.ConnectError as exc:
            failure = _reason(exc)
            continue
        try:
            yield response
        finally:
            await response.aclose()
        return
    raise WebError(f"cannot connect to {target.host}:{target.port}: {failure}")


def _request(client: httpx2.AsyncClient, target: _Target, address: str) -> httpx2.Request:
    extensions = {}
    if target.url.scheme == "https" and not is_address(target.host):
        extensions["sni_hostname"] = target.host  # verified against this name
    headers = {"Host": target.url.netloc.decode("ascii"), "User-Agent": USER_AGENT}
    return client.build_request(
        "GET",
        target.url.copy_with(host=address),
        headers=headers | {"Accept": ACCEPT},
        extensions=extensions,
    )


async def _read(response: httpx2.Response, limit: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > limit:
            chunks.append(chunk[: limit - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def _content_type(header: str) -> tuple[str, str | None]:
    media, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return media.strip().lower(), charset


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]
