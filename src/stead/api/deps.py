"""Request-scoped dependencies: the app's services and the authenticated caller."""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass

from fastapi import Request
from starlette.requests import HTTPConnection

from stead.api.errors import ApiError
from stead.config import Settings
from stead.runtime import (
    Bus,
    FileKeeper,
    LeaseSweeper,
    MemoryKeeper,
    Runtime,
    SandboxToolbox,
    SkillKeeper,
    WebhookEndpoints,
)
from stead.store import TOKEN_PREFIX, ApiKey, Store
from stead.vault import SecretBox


class KeyCache:
    """Keys authenticated in the last ``ttl`` seconds, so most requests skip a store read.

    Entries are keyed by the secret's hash; the cache is bounded and least recently
    used entries go first.
    """

    def __init__(self, ttl: float, capacity: int = 4096) -> None:
        self._ttl = ttl
        self._capacity = capacity
        self._entries: OrderedDict[str, tuple[ApiKey, float]] = OrderedDict()

    @staticmethod
    def _digest(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    def get(self, secret: str) -> ApiKey | None:
        digest = self._digest(secret)
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[1] < time.monotonic():
            del self._entries[digest]
            return None
        self._entries.move_to_end(digest)
        return entry[0]

    def put(self, secret: str, key: ApiKey) -> None:
        digest = self._digest(secret)
        self._entries[digest] = (key, time.monotonic() + self._ttl)
        self._entries.move_to_end(digest)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)


@dataclass(frozen=True)
class Services:
    """What the lifespan opened; routes reach it through ``services(request)``."""

    settings: Settings
    store: Store
    bus: Bus
    keys: KeyCache
    runtime: Runtime
    sandboxes: SandboxToolbox
    sweeper: LeaseSweeper | None
    """None when this server runs no sandbox host (``STEAD_SANDBOX`` is not bwrap)."""
    cursor_secret: bytes
    """The installation's key for page cursors (``pagination.py``)."""
    secrets: SecretBox
    """Seals and opens vault credentials' secrets (``stead.vault``)."""
    files: FileKeeper
    """The Files API's bytes (blob store) and metadata (store)."""
    skills: SkillKeeper
    """Skill versions: their zips (through ``files``) and metadata."""
    webhooks: WebhookEndpoints
    """Registers webhook endpoints (``api/webhooks.py``)."""
    memories: MemoryKeeper
    """Memory content (blob store) and versions (store); shares ``files``' blob store."""


@dataclass(frozen=True)
class Caller:
    workspace_id: str
    key_id: str
    admin: bool = False
    """An operator's key (``stead keys create --admin``)."""


def services(request: HTTPConnection) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


CONSOLE_COOKIE = "stead_console_key"
"""The console's API key: HttpOnly, SameSite=Strict, set by ``POST /console/login``."""
CONSOLE_HEADER = "x-stead-console"
"""Sent by the console's every request. Another origin cannot send a custom
header without a CORS preflight, which stead never grants, so the cookie alone
authorises nothing it could forge."""


def _presented_key(request: HTTPConnection) -> str | None:
    header = request.headers.get("x-api-key")
    if header:
        return header.strip()
    authorization = request.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return _console_key(request)


def _console_key(request: HTTPConnection) -> str | None:
    """The console's cookie, when the request shows it came from the console's
    own pages: an HTTP request by its custom header, a WebSocket (whose browser
    API sends no custom header) by an ``Origin`` naming this very host."""
    cookie = request.cookies.get(CONSOLE_COOKIE)
    if not cookie or cookie.startswith(TOKEN_PREFIX):
        return None
    if request.scope["type"] == "websocket":
        return cookie if same_origin(request) else None
    if request.headers.get(CONSOLE_HEADER) != "1":
        return None
    origin = request.headers.get("origin")
    return cookie if origin is None or same_origin(request) else None


def same_origin(request: HTTPConnection) -> bool:
    """The request's ``Origin`` names the host it was sent to."""
    origin = request.headers.get("origin", "")
    _, _, authority = origin.partition("://")
    return bool(authority) and authority == request.headers.get("host")


async def caller(request: Request) -> Caller:
    return await authenticate(request)


async def admin_caller(request: Request) -> Caller:
    who = await authenticate(request)
    if not who.admin:
        raise ApiError(403, "this route needs an admin API key (stead keys create --admin)")
    return who


async def authenticate(request: HTTPConnection) -> Caller:
    """The caller of an HTTP request or a WebSocket, from its API key header."""
    secret = _presented_key(request)
    if secret is None:
        raise ApiError(401, "send an API key as 'x-api-key' or 'Authorization: Bearer <key>'")
    app = services(request)
    if secret.startswith(TOKEN_PREFIX):
        return await _work_token_caller(request, secret)
    key = app.keys.get(secret)
    if key is None:
        key = await app.store.authenticate(secret)
        if key is None:
            raise ApiError(401, "invalid API key")
        app.keys.put(secret, key)
    workspace = request.headers.get("anthropic-workspace-id")
    if workspace and workspace != key.workspace_id:
        raise ApiError(403, "anthropic-workspace-id: this API key belongs to another workspace")
    return Caller(workspace_id=key.workspace_id, key_id=key.id, admin=key.admin)


async def _work_token_caller(request: HTTPConnection, secret: str) -> Caller:
    """A self-hosted worker's sessions token: good for reading its item's session
    and sending its events (the tools' results) only, and only while its claim
    lasts (never cached, so a new claim revokes it at once). What a worker does
    not need (changing, archiving or deleting the session, its resources or
    threads, a terminal) takes an API key."""
    token = await services(request).store.authenticate_work_token(secret)
    if token is None:
        raise ApiError(401, "invalid sessions token, or its claim ended")
    own = f"/v1/sessions/{token.session_id}"
    path = request.url.path
    if token.session_id is None or not (path == own or path.startswith(own + "/")):
        raise ApiError(403, f"this sessions token is good for session {token.session_id} only")
    method = request.scope.get("method")
    reads = request.scope["type"] == "http" and method in ("GET", "HEAD")
    if not reads and not (method == "POST" and path == own + "/events"):
        raise ApiError(
            403,
            f"a sessions token reads session {token.session_id} and sends its events; "
            "anything else takes an API key",
        )
    return Caller(workspace_id=token.workspace_id, key_id=token.work_id)
