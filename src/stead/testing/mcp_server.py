"""``FakeMcpServer``: a real MCP server (the ``mcp`` SDK's, Streamable HTTP) on
loopback that wants a bearer token, with an OAuth token endpoint beside it.

Tests of vault credentials and MCP toolsets use it: tokens can be revoked or
made to expire, the token endpoint answers ``refresh_token`` grants with the
client authentication a credential names, and every request's ``Authorization``
is recorded so a test can tell which token reached it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from mcp import MCPError
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
STALL_SECONDS = 120.0
"""How long a stalled token endpoint keeps sending a byte now and then."""
MCP_TEST_HOST = "mcp.stead.test"
"""The name the fake's URLs use: stead's egress rules refuse loopback
addresses, so a server under test pins this name to 127.0.0.1 in
``STEAD_EGRESS_HOSTS`` (``MCP_TEST_PIN``), as an operator would a private host."""
MCP_TEST_PIN = {MCP_TEST_HOST: "127.0.0.1"}


@dataclass
class OAuthClient:
    """What the token endpoint expects of a refresh: the client and how it authenticates."""

    client_id: str = "stead-test-client"
    client_secret: str | None = None
    method: str = "none"
    """``none``, ``client_secret_basic`` or ``client_secret_post``."""


@dataclass
class _Book:
    lock: threading.Lock = field(default_factory=threading.Lock)
    access: set[str] = field(default_factory=set)
    refresh: set[str] = field(default_factory=set)
    seen_tokens: list[str] = field(default_factory=list)
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    refreshes: int = 0
    refresh_tokens_given: list[str] = field(default_factory=list)


class _RequireBearer:
    def __init__(self, app: ASGIApp, book: _Book) -> None:
        self._app = app
        self._book = book

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"").decode()
        token = header.removeprefix("Bearer ") if header.startswith("Bearer ") else ""
        with self._book.lock:
            self._book.seen_tokens.append(token)
            allowed = token in self._book.access
        if not allowed:
            body = b'{"error":"invalid_token","error_description":"the token is not valid"}'
            response = Response(
                body,
                status_code=401,
                media_type="application/json",
                headers={"www-authenticate": 'Bearer error="invalid_token"'},
            )
            await response(scope, receive, send)
            return
        await self._app(scope, receive, send)


class _RawTools:
    """Adds ``tools``, as they are, to the server's ``tools/list`` answers: tools
    the SDK's own server would refuse to list (a schema whose type is not
    ``object``), as a server of another make may list them."""

    def __init__(self, app: ASGIApp, tools: Sequence[Mapping[str, Any]]) -> None:
        self._app = app
        self._tools = [dict(t) for t in tools]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or not self._tools:
            await self._app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            listing = json.loads(body).get("method") == "tools/list"
        except (ValueError, AttributeError):
            listing = False
        if not listing:
            await self._app(scope, replay, send)
            return
        start: dict[str, Any] = {}
        answer = b""

        async def keep(message: Any) -> None:
            nonlocal answer
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                answer += message.get("body", b"")

        await self._app(scope, replay, keep)
        answer = self._added(answer)
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(answer)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    def _added(self, answer: bytes) -> bytes:
        """The answer (JSON, or server-sent events of JSON) with the tools added."""

        def added(text: str) -> str:
            message = json.loads(text)
            if isinstance(message.get("result"), dict) and "tools" in message["result"]:
                message["result"]["tools"] += self._tools
            return json.dumps(message)

        lines = answer.decode().split("\n")
        if not any(line.startswith("data:") for line in lines):
            return added(answer.decode()).encode()
        return "\n".join(
            "data: " + added(line[5:]) if line.startswith("data:") else line for line in lines
        ).encode()


async def _trickle() -> AsyncIterator[bytes]:
    for _ in range(int(STALL_SECONDS / 0.5)):
        yield b" "
        await anyio.sleep(0.5)


class FakeMcpServer:
    """Serves MCP at ``url`` (tools ``echo``, ``refuse``, ``whoami`` and ``add``)
    and OAuth at ``token_url``.

    ``issue_token()`` makes an access token the server accepts, ``revoke`` makes
    it stop; ``issue_refresh_token()`` one the token endpoint exchanges (once:
    refresh tokens rotate). Start once; stop ends it.
    """

    def __init__(
        self,
        client: OAuthClient | None = None,
        odd_schemas: Mapping[str, Any] | None = None,
        raw_tools: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """``odd_schemas``: more tools, by name, listed with these input schemas
        (whatever they are) and answering "ok". ``raw_tools``: tools added to
        every ``tools/list`` answer as they are (past the SDK's own checks)."""
        self.client = client or OAuthClient()
        self.stall_token_endpoint = False
        self.echo_delay = 0.0
        """Seconds ``echo`` takes (after recording its call)."""
        """The token endpoint answers 200 and then a space every half second,
        never finishing its answer (within ``STALL_SECONDS``)."""
        self._book = _Book()
        mcp = MCPServer("stead-fake-mcp")

        @mcp.tool(description="Returns its text.")
        def echo(text: str) -> str:
            with self._book.lock:
                self._book.tool_calls.append(("echo", {"text": text}))
            time.sleep(self.echo_delay)
            return text

        @mcp.tool(description="Refuses with a JSON-RPC error (the SDK answers it HTTP 400).")
        def refuse(why: str) -> str:
            with self._book.lock:
                self._book.tool_calls.append(("refuse", {"why": why}))
            raise MCPError(-32602, f"refused: {why}")

        @mcp.tool(description="Says the bearer token the server saw last, as careless ones do.")
        def whoami() -> str:
            with self._book.lock:
                self._book.tool_calls.append(("whoami", {}))
                return f"you are {self._book.seen_tokens[-1]}"

        @mcp.tool(description="Adds two integers.")
        def add(a: int, b: int) -> int:
            with self._book.lock:
                self._book.tool_calls.append(("add", {"a": a, "b": b}))
            return a + b

        for name, schema in (odd_schemas or {}).items():
            mcp.add_tool(lambda: "ok", name=name, description="An odd schema.")
            odd = mcp._tool_manager.get_tool(name)  # no public way to set it
            assert odd is not None
            odd.parameters = dict(schema)

        # The SDK guards a loopback server against DNS rebinding by its Host
        # header; stead reaches this one by the pinned test name.
        security = TransportSecuritySettings(
            allowed_hosts=[f"{MCP_TEST_HOST}:*", "127.0.0.1:*"],
            allowed_origins=[f"http://{MCP_TEST_HOST}:*", "http://127.0.0.1:*"],
        )
        inner = mcp.streamable_http_app(
            streamable_http_path="/", stateless_http=True, transport_security=security
        )
        self._app = Starlette(
            routes=[
                Route("/token", self._token, methods=["POST"]),
                Mount("/mcp", app=_RequireBearer(_RawTools(inner, raw_tools), self._book)),
            ],
            lifespan=self._lifespan,
        )
        self._inner = inner
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        # The mounted MCP app's session manager runs in its own lifespan, which a
        # Mount does not run: enter it here.
        async with self._inner.router.lifespan_context(self._inner):
            yield

    @property
    def url(self) -> str:
        return f"http://{MCP_TEST_HOST}:{self.port}/mcp/"

    @property
    def loopback_url(self) -> str:
        """The same server by its address, which the egress rules refuse."""
        return f"http://127.0.0.1:{self.port}/mcp/"

    @property
    def token_url(self) -> str:
        return f"http://{MCP_TEST_HOST}:{self.port}/token"

    def issue_token(self) -> str:
        token = "mcp-at-" + secrets.token_hex(12)
        with self._book.lock:
            self._book.access.add(token)
        return token

    def revoke(self, token: str) -> None:
        with self._book.lock:
            self._book.access.discard(token)

    def issue_refresh_token(self) -> str:
        token = "mcp-rt-" + secrets.token_hex(12)
        with self._book.lock:
            self._book.refresh.add(token)
        return token

    @property
    def seen_tokens(self) -> list[str]:
        with self._book.lock:
            return list(self._book.seen_tokens)

    @property
    def tool_calls(self) -> list[tuple[str, dict[str, Any]]]:
        with self._book.lock:
            return list(self._book.tool_calls)

    @property
    def refreshes(self) -> int:
        with self._book.lock:
            return self._book.refreshes

    @property
    def refresh_tokens_given(self) -> list[str]:
        """Every refresh token a ``refresh_token`` grant presented, taken or not."""
        with self._book.lock:
            return list(self._book.refresh_tokens_given)

    async def _token(self, request: Request) -> Response:
        if self.stall_token_endpoint:
            return StreamingResponse(_trickle(), media_type="application/json")
        form = await request.form()
        client_id, secret = str(form.get("client_id", "")), form.get("client_secret")
        basic = request.headers.get("authorization", "")
        if basic.startswith("Basic "):
            client_id, _, given = base64.b64decode(basic[6:]).decode().partition(":")
            secret = given
            method = "client_secret_basic"
        else:
            method = "client_secret_post" if secret is not None else "none"
        wanted = self.client
        if (
            client_id != wanted.client_id
            or method != wanted.method
            or (wanted.client_secret is not None and secret != wanted.client_secret)
        ):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        if form.get("grant_type") != "refresh_token":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        given_refresh = str(form.get("refresh_token", ""))
        with self._book.lock:
            self._book.refresh_tokens_given.append(given_refresh)
            if given_refresh not in self._book.refresh:
                # Echoes what it was sent, as careless servers do: what stead
                # shows of this answer must not carry the client's secrets.
                sent = {"authorization": basic, "form": {k: str(v) for k, v in form.items()}}
                return JSONResponse({"error": "invalid_grant", "sent": sent}, status_code=400)
            self._book.refresh.discard(given_refresh)
            self._book.refreshes += 1
        return JSONResponse(
            {
                "access_token": self.issue_token(),
                "token_type": "Bearer",
                "expires_in": 3600,
                "refresh_token": self.issue_refresh_token(),
            }
        )

    def start(self) -> FakeMcpServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(self._app, lifespan="on", log_config=None)
        self._server = uvicorn.Server(config)
        started = threading.Event()

        def run() -> None:
            assert self._server is not None
            try:
                self._server.run(sockets=[sock])
            finally:
                sock.close()
                started.set()

        self._thread = threading.Thread(target=run, name="stead-fake-mcp", daemon=True)
        self._thread.start()
        for _ in range(int(START_TIMEOUT / 0.01)):
            if self._server.started or started.is_set():
                break
            started.wait(0.01)
        if not self._server.started:
            self.stop()
            raise RuntimeError(f"the fake MCP server did not start within {START_TIMEOUT}s")
        return self

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(STOP_TIMEOUT)
        if self._thread.is_alive():
            raise RuntimeError(f"the fake MCP server did not stop within {STOP_TIMEOUT}s")
