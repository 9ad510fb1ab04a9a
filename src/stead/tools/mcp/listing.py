"""A server's ``tools/list`` answers, each tool the ``mcp`` SDK would refuse left out.

The SDK checks a listing whole against the protocol version the connection
negotiated: one tool it refuses (an input schema whose ``type`` is not
``object``, ``properties`` that is no object, no input schema at all) fails the
whole listing, so none of the server's tools could be offered. The transport
here sees each ``tools/list`` answer before the SDK does and leaves out each
tool the SDK's check refuses on its own (logged), so the server's other tools
are offered. A listing the check refuses whatever its tools (a malformed
answer) is passed on as it came, for the SDK to report.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
from mcp.types import methods
from pydantic import ValidationError

log = logging.getLogger("stead.tools.mcp")
LIST_TOOLS = "tools/list"
FALLBACK_VERSION = "2025-11-25"
"""The version the SDK checks an answer against before one is negotiated."""


class ListingFilter(httpx2.AsyncBaseTransport):
    """Wraps the transport of one MCP operation (``connection._connected``)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        if request.method != "POST" or not _lists_tools(request):
            return response
        version = request.headers.get("mcp-protocol-version") or FALLBACK_VERSION
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        headers = [(k, v) for k, v in response.headers.raw if k.lower() != b"content-length"]
        if kind == "application/json":
            body = _filtered(await response.aread(), version)
            await response.aclose()
            return httpx2.Response(
                response.status_code,
                headers=headers,
                content=body,
                request=request,
                extensions=response.extensions,
            )
        if kind == "text/event-stream":
            return httpx2.Response(
                response.status_code,
                headers=headers,
                stream=_FilteredEvents(response, version),
                request=request,
                extensions=response.extensions,
            )
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _lists_tools(request: httpx2.Request) -> bool:
    try:
        message = json.loads(request.content)
    except (httpx2.RequestNotRead, ValueError):
        return False
    return isinstance(message, dict) and message.get("method") == LIST_TOOLS


class _FilteredEvents(httpx2.AsyncByteStream):
    """Server-sent events as they come, each whole event's data filtered."""

    def __init__(self, response: httpx2.Response, version: str) -> None:
        self._response = response
        self._version = version

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = b""
        async for chunk in self._response.aiter_raw():
            pending += chunk
            while True:
                end, size = _event_end(pending)
                if end < 0:
                    break
                yield _filtered_event(pending[:end], self._version) + b"\n\n"
                pending = pending[end + size :]
        if pending:
            yield _filtered_event(pending, self._version)

    async def aclose(self) -> None:
        await self._response.aclose()


def _event_end(data: bytes) -> tuple[int, int]:
    """Where the first event in ``data`` ends and the size of the blank line ending it."""
    found = [(i, len(sep)) for sep in (b"\r\n\r\n", b"\n\n", b"\r\r") if (i := data.find(sep)) >= 0]
    return min(found) if found else (-1, 0)


def _filtered_event(event: bytes, version: str) -> bytes:
    lines = event.decode("utf-8", errors="replace").splitlines()
    data = [line[5:].removeprefix(" ") for line in lines if line.startswith("data:")]
    if not data:
        return event
    body = "\n".join(data)
    filtered = _filtered(body.encode(), version).decode()
    if filtered == body:
        return event
    kept = [line for line in lines if not line.startswith("data:")]
    return "\n".join([*kept, *(f"data: {line}" for line in filtered.split("\n"))]).encode()


def _filtered(body: bytes, version: str) -> bytes:
    """A JSON-RPC answer to ``tools/list`` without the tools the SDK refuses."""
    try:
        message = json.loads(body)
    except ValueError:
        return body
    result = message.get("result") if isinstance(message, dict) else None
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return body
    if not _accepted({**result, "tools": []}, version):
        return body  # refused whatever its tools: the SDK says why
    kept = []
    for tool in result["tools"]:
        if _accepted({**result, "tools": [tool]}, version):
            kept.append(tool)
        else:
            name = tool.get("name") if isinstance(tool, dict) else None
            log.warning(
                "MCP tool %r left out: the mcp SDK refuses its listing (protocol %s)",
                str(name)[:200],
                version,
            )
    if len(kept) == len(result["tools"]):
        return body
    message["result"] = {**result, "tools": kept}
    return json.dumps(message).encode()


def _accepted(result: dict[str, Any], version: str) -> bool:
    try:
        methods.validate_server_result(LIST_TOOLS, version, result)
    except ValidationError:
        return False
    except (KeyError, ValueError):  # a version or method it has no check for
        return True
    return True
