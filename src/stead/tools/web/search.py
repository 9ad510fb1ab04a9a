"""web_search through the operator's search provider: a SearXNG instance
(``STEAD_WEB_SEARCH_URL``), asked ``GET <url>/search?q=...&format=json``.

SearXNG is free software and self-hosted, and its JSON answer is simple; any
server that answers the same shape works. The provider is the operator's
choice, so its own address is not held to the blocklist (it often lives on a
private network), but the call has the same time and size limits as a fetch,
and the query is checked against the session's credentials. Results whose host
the tool's domain lists refuse are left out. ``user_location`` is not sent:
SearXNG has no such parameter.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from stead.egress_policy import DomainPolicy
from stead.tools.outcome import ToolOutcome
from stead.tools.web.errors import WebError
from stead.tools.web.fetch import USER_AGENT
from stead.tools.web.guard import CredentialGuard
from stead.tools.web.options import WebOptions

if TYPE_CHECKING:
    import httpx2

MAX_RESULTS = 10
SNIPPET_CHARS = 500
NOT_CONFIGURED = (
    "web_search is not configured on this stead: the operator sets STEAD_WEB_SEARCH_URL "
    "to a SearXNG instance (with the json format enabled) to turn it on"
)


async def search(
    query: str, policy: DomainPolicy, options: WebOptions, guard: CredentialGuard
) -> ToolOutcome:
    """Raises ``WebError`` when the provider is unset, unreachable or answers badly."""
    if options.search_url is None:
        raise WebError(NOT_CONFIGURED)
    if not query.strip():
        raise WebError("query must not be empty")
    url = options.search_url.rstrip("/") + "/search"
    guard.check(query, urlsplit(url).hostname or "", "the query")
    answer = await _ask(url, query, options)
    found = answer.get("results") or []
    if not isinstance(found, list):
        raise WebError("the search provider's answer is malformed: its results are not a list")
    results = [r for r in found if _usable(r)]
    kept = [r for r in results if policy.allows_host(urlsplit(r["url"]).hostname or "")]
    return ToolOutcome.text(_render(kept[:MAX_RESULTS], len(results) - len(kept)))


async def _ask(url: str, query: str, options: WebOptions) -> dict[str, Any]:
    import httpx2  # at first use: a server that never searches loads none of it

    params = {"q": query, "format": "json"}
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    try:
        with anyio.fail_after(options.timeout):
            async with (
                httpx2.AsyncClient(
                    verify=options.tls, trust_env=False, timeout=options.timeout
                ) as client,
                client.stream("GET", url, params=params, headers=headers) as response,
            ):
                body = await _body(response, options.max_bytes)
    except TimeoutError:
        raise WebError(f"the search provider did not answer within {options.timeout:g} s") from None
    except httpx2.HTTPError as exc:
        raise WebError(f"the search provider cannot be reached: {str(exc)[:300]}") from None
    if response.status_code != 200:
        raise WebError(_refusal(response.status_code))
    try:
        answer = json.loads(body)
    except ValueError:
        raise WebError("the search provider's answer is not JSON") from None
    if not isinstance(answer, dict):
        raise WebError("the search provider's answer is not a JSON object")
    return answer


async def _body(response: httpx2.Response, limit: int) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise WebError(f"the search provider's answer is larger than {limit} bytes")
    return bytes(body)


def _refusal(status: int) -> str:
    message = f"the search provider answered HTTP {status}"
    if status == 403:
        message += " (a SearXNG instance answers so when its json format is not enabled)"
    return message


def _usable(result: object) -> bool:
    """A result with an http(s) URL that parses (engines pass on what they find)."""
    if not isinstance(result, dict) or not isinstance(result.get("url"), str):
        return False
    try:
        parts = urlsplit(result["url"])
        parts.hostname, parts.port  # noqa: B018 (each raises on a malformed address)
    except ValueError:
        return False
    return parts.scheme in ("http", "https")


def _render(results: list[dict[str, Any]], left_out: int) -> str:
    # The query is not repeated: web_fetch may fetch URLs from this result, and
    # a URL the model wrote into its query must not become fetchable that way.
    lines = ["Search results:" if results else "No results."]
    for number, result in enumerate(results, 1):
        title = _line(result.get("title")) or "(no title)"
        lines += ["", f"{number}. {title}", f"   {result['url']}"]
        snippet = _line(result.get("content"))
        if snippet:
            cut = "..." if len(snippet) > SNIPPET_CHARS else ""
            lines.append(f"   {snippet[:SNIPPET_CHARS]}{cut}")
    if left_out:
        lines += ["", f"[{left_out} results left out by the tool's allowed or blocked domains]"]
    return "\n".join(lines)


def _line(value: object) -> str:
    return " ".join(value.split()) if isinstance(value, str) else ""
