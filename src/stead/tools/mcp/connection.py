"""One MCP server over Streamable HTTP with a bearer token.

The SDK reports an HTTP-level refusal (a 401 from the server's auth, a 5xx
from its proxy) as an exception without the response; a response hook keeps
the first refused one, so callers can tell "the token is not accepted" from
"the server is unreachable" and show what the server said.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

BODY_LIMIT = 4096
"""Characters of a refused response's body kept for the caller."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A refused HTTP response, in the shape of the API's ``http_response``."""

    status_code: int
    content_type: str
    body: str
    body_truncated: bool

    def redacted(self, secrets: Sequence[str]) -> HttpResponse:
        """The same with any of ``secrets`` an upstream echoed replaced."""
        body = self.body
        for secret in secrets:
            if secret:
                body = body.replace(secret, "[redacted]")
        return HttpResponse(self.status_code, self.content_type, body, self.body_truncated)


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


async def captured(response: httpx2.Response) -> HttpResponse:
    text = (await response.aread()).decode("utf-8", errors="replace")
    return HttpResponse(
        status_code=response.status_code,
        content_type=response.headers.get("content-type", ""),
        body=text[:BODY_LIMIT],
        body_truncated=len(text) > BODY_LIMIT,
    )


async def list_tools(url: str, token: str, seconds: float) -> list[str]:
    """Connects (``initialize``), lists the server's tools and disconnects; the
    tool names. Each HTTP exchange, and the whole, ends after ``seconds``;
    ``McpFailed`` names the step that failed."""
    refused: list[HttpResponse] = []
    step = "initialize"

    async def keep_refusal(response: httpx2.Response) -> None:
        if response.status_code >= 400 and not refused:
            refused.append(await captured(response))

    http = httpx2.AsyncClient(
        headers={"authorization": f"Bearer {token}"},
        timeout=httpx2.Timeout(seconds),
        event_hooks={"response": [keep_refusal]},
        follow_redirects=False,
    )
    try:
        with anyio.fail_after(seconds):
            async with http, Client(streamable_http_client(url, http_client=http)) as client:
                step = "tools/list"
                listed = await client.list_tools()
                return [tool.name for tool in listed.tools]
    except TimeoutError:
        raise McpFailed(step, f"{step}: no answer within {seconds:g}s") from None
    except Exception as exc:  # the SDK raises ExceptionGroups and its own errors alike
        http_refusal = refused[0] if refused else None
        if http_refusal is not None:
            message = f"{step}: the server answered HTTP {http_refusal.status_code}"
        else:
            message = f"{step}: {_first_cause(exc)}"
        raise McpFailed(step, message, http_refusal) from None


def _first_cause(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"[:500]
