"""The brain's MCP and OAuth connections read at most ``ANSWER_MAX_BYTES`` of
one answer: a server that sends more is cut off, not held whole in memory."""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream

from stead.egress_policy import EgressPolicy
from stead.tools.mcp import transport
from stead.tools.mcp.transport import EgressRules

pytestmark = pytest.mark.anyio
CHUNK = b"x" * 65536


async def _serve_endless(stream: SocketStream) -> None:
    """Answers any request with a body that never ends (until the client leaves)."""
    async with stream:
        await stream.receive()
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n")
        with contextlib.suppress(anyio.BrokenResourceError):
            while True:
                await stream.send(CHUNK)


@pytest.fixture
async def endless() -> AsyncIterator[int]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, _serve_endless)
        yield int(listener.extra(anyio.abc.SocketAttribute.local_port))
        group.cancel_scope.cancel()


async def test_an_answer_past_the_limit_is_refused(
    endless: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(transport, "ANSWER_MAX_BYTES", 1024 * 1024)
    rules = EgressRules(
        EgressPolicy.from_config({"type": "unrestricted"}),
        ssl.create_default_context(),
        {"mcp.test": "127.0.0.1"},  # the operator's pin: loopback is allowed so
    )
    received = 0
    url = f"http://mcp.test:{endless}/mcp"
    with anyio.fail_after(30):
        async with (
            httpx2.AsyncClient(transport=rules.transport()) as http,
            http.stream("POST", url) as answer,
        ):
            with pytest.raises(httpx2.ReadError, match="passed 1 MiB; stead reads no more"):
                async for chunk in answer.aiter_bytes():
                    received += len(chunk)
    assert received <= 1024 * 1024
