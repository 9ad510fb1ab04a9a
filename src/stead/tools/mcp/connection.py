"""One MCP server over Streamable HTTP with a bearer token.

Each operation opens a connection (``initialize``), does its work and closes
it: stead keeps no MCP connection between tool calls, so a brain that restarts
or a server that restarts loses nothing, and a server's session state never
outlives one call.

The SDK reports an HTTP-level refusal (a 401 from the server's auth, a 5xx
from its proxy) as an exception without the response; a response hook keeps
the first refused one, so callers can tell "the token is not accepted" from
"the server is unreachable" and show what the server said.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus

import anyio
import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from stead.jsonvalues import Json
from stead.telemetry import trace_headers
from stead.tools.mcp.listing import ListingFilter
from stead.tools.mcp.transport import EgressRules

BODY_LIMIT = 4096
"""Characters of a refused response's body kept for the caller."""
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A refused HTTP response, in the shape of the API's ``http_response``."""

    status_code: int
    content_type: str
    body: str
    body_truncated: bool

    def redacted(self, secrets: Sequence[str]) -> HttpResponse:
        """The same with any of ``secrets`` an upstream echoed replaced, as sent
        or as a form, a URL or a JSON string would carry it."""
        body = redact(self.body, secrets)
        return HttpResponse(self.status_code, self.content_type, body, self.body_truncated)


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with any of ``secrets`` replaced, as sent or as a form, a URL or
    a JSON string would carry it."""
    for form in _written_forms(secrets):
        text = text.replace(form, "[redacted]")
    return text


def _written_forms(secrets: Sequence[str]) -> list[str]:
    """Each secret and its escaped forms, longest first (so a form that holds
    another is replaced whole)."""
    forms = set()
    for secret in secrets:
        if secret:
            forms |= {secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]}
    return sorted(forms, key=len, reverse=True)


class McpFailed(Exception):
    """The MCP server could not be used: ``http`` is its refusal, when it sent one;
    ``method`` is the MCP step that failed."""

    def __init__(self, method: str, message: str, http: HttpResponse | None = None) -> None:
        self.method = method
        self.http = http
        super().__init__(message)

    @property
    def unauthorized(self) -> bool:
        return self.http is not None and self.http.status_code == 401


class McpRefused(Exception):
    """The server answered the request with an MCP error (an unknown tool, bad
    arguments): the connection and the token are fine, the call is not."""


@dataclass(frozen=True, slots=True)
class McpToolSpec:
    """A tool as the server lists it."""

    name: str
    description: str
    input_schema: Json
    read_only: bool
    """The server says the tool changes nothing (``readOnlyHint``), so a call
    in doubt after a crash may simply be made again."""


async def captured(response: httpx2.Response) -> HttpResponse:
    text = (await response.aread()).decode("utf-8", errors="replace")
    return HttpResponse(
        status_code=response.status_code,
        content_type=response.headers.get("content-type", ""),
        body=text[:BODY_LIMIT],
        body_truncated=len(text) > BODY_LIMIT,
    )


async def _connected(
    url: str,
    token: str | None,
    seconds: float,
    rules: EgressRules,
    step: str,
    work: Callable[[Client], Awaitable[T]],
) -> T:
    """``work`` on a connection that is initialised, then closed. Each HTTP
    exchange, and the whole, ends after ``seconds``; ``McpFailed`` names the
    step that failed (``initialize`` until the connection is up, then ``step``)."""
    refused: list[HttpResponse] = []
    current = "initialize"

    async def keep_refusal(response: httpx2.Response) -> None:
        # The requests' answers only: a stateful server may answer the SDK's GET
        # for server-sent messages (or its DELETE at the end) 405, as the spec allows.
        if response.status_code >= 400 and not refused and response.request.method == "POST":
            refused.append(await captured(response))

    http = httpx2.AsyncClient(
        headers=trace_headers({"authorization": f"Bearer {token}"} if token else {}),
        timeout=httpx2.Timeout(seconds),
        event_hooks={"response": [keep_refusal]},
        follow_redirects=False,
        transport=ListingFilter(rules.transport()),
    )
    try:
        with anyio.fail_after(seconds):
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                current = step
                return await work(client)
    except TimeoutError:
        raise McpFailed(current, f"{current}: no answer within {seconds:g}s") from None
    except Exception as exc:  # the SDK raises ExceptionGroups and its own errors alike
        refusal = _first(exc, MCPError)
        # A JSON-RPC error is the server's answer even when it comes with an HTTP
        # error status (the SDK's own server sends a tool's MCPError as a 400):
        # the model gets its message. A 401 is the token's refusal whatever the body.
        unauthorized = bool(refused) and refused[0].status_code == 401
        if (
            isinstance(refusal, MCPError)
            and not unauthorized
            and (refusal is exc or current == step)
        ):
            raise McpRefused(f"{current}: the server refused: {refusal.error.message}") from None
        if refused:
            raise _refusal(current, refused[0]) from None
        raise McpFailed(current, f"{current}: {_describe(exc)}") from None


def _refusal(step: str, response: HttpResponse) -> McpFailed:
    return McpFailed(step, f"{step}: the server answered HTTP {response.status_code}", response)


async def list_tools(
    url: str, token: str | None, seconds: float, rules: EgressRules
) -> list[McpToolSpec]:
    """Connects, lists all the server's tools (every page) and disconnects."""

    async def listed(client: Client) -> list[McpToolSpec]:
        found: list[McpToolSpec] = []
        cursor: str | None = None
        for _ in range(100):  # a server that pages forever is cut off, not followed
            page = await client.list_tools(cursor=cursor)
            found.extend(_spec(tool) for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return found

    return await _connected(url, token, seconds, rules, "tools/list", listed)


def _spec(tool: Any) -> McpToolSpec:
    hints = tool.annotations
    return McpToolSpec(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        read_only=bool(hints is not None and hints.read_only_hint),
    )


async def call_tool(
    url: str,
    token: str | None,
    seconds: float,
    rules: EgressRules,
    name: str,
    arguments: Json,
    *,
    op_key: str,
) -> Any:
    """Connects, calls tool ``name`` and disconnects; the SDK's ``CallToolResult``.
    ``op_key`` goes with the call in ``_meta``, for servers that deduplicate."""

    async def called(client: Client) -> Any:
        meta: Any = {"stead/op_key": op_key}
        return await client.call_tool(name, arguments, read_timeout_seconds=seconds, meta=meta)

    return await _connected(url, token, seconds, rules, "tools/call", called)


def _first(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of ``kind`` in ``exc`` or the groups it nests."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first(inner, kind)
            if found is not None:
                return found
    return None


def _describe(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:500]
