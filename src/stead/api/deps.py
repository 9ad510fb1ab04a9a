"""Request-scoped dependencies: the app's services and the authenticated caller."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime

import anyio
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
from stead.store import TOKEN_PREFIX, ApiKey, Store, StoreError
from stead.vault import SealError, SecretBox


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
    stopping: anyio.Event = field(default_factory=anyio.Event)
    """Set when the server begins to stop (``stop_streams``): long-lived
    responses (event streams) end then, not when the graceful shutdown's
    time is up."""


@dataclass(frozen=True)
class Caller:
    workspace_id: str
    key_id: str
    admin: bool = False
    """An operator's key (``stead keys create --admin``)."""


def services(request: HTTPConnection) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


CONSOLE_COOKIE = "stead_console_key"
"""The console's login (``console_login``): HttpOnly, SameSite=Strict, set by
``POST /console/login``."""
CONSOLE_HEADER = "x-stead-console"
"""Sent by the console's every request, with its login's token. Another origin
cannot send a custom header without a CORS preflight, which stead never grants;
and the token is kept in the page's ``localStorage``, which is the page's own
origin's, port included, while a cookie goes to every port of the host."""
CONSOLE_TOKEN_QUERY = "console_token"
"""Where a terminal's WebSocket (whose browser API sends no custom header)
carries the login's token."""
CONSOLE_LOGIN_SECONDS = 12 * 3600
"""How long a console login lasts."""
CLOCK_SKEW_SECONDS = 300
CONSOLE_LOGIN = "console-login"
"""What a console login is sealed for (``SecretBox``)."""


def console_login(box: SecretBox, api_key: str, now: float) -> tuple[str, str]:
    """(cookie, token) of a new console login: the cookie seals the API key with
    a random token and the time, and is good only beside that token. A server
    on another port of the host receives the cookie (cookies ignore ports), and
    learns neither the key nor anything it could use alone."""
    token = secrets.token_urlsafe(24)
    sealed = box.seal(CONSOLE_LOGIN, {"key": api_key, "token": token, "at": now})
    return base64.urlsafe_b64encode(sealed).decode(), token


@dataclass(frozen=True, slots=True)
class ConsoleLogin:
    """What a console login's cookie seals."""

    key: str
    token: str
    at: float
    """When it was made (``time.time()``)."""

    @property
    def token_hash(self) -> str:
        """How the store knows the login once it ended (``end_console_login``)."""
        return hashlib.sha256(self.token.encode()).hexdigest()

    @property
    def expires_at(self) -> datetime:
        """When it ends anyway, a clock's skew later than its age allows."""
        ends = self.at + CONSOLE_LOGIN_SECONDS + CLOCK_SKEW_SECONDS
        return datetime.fromtimestamp(ends, UTC)


def _presented(request: HTTPConnection) -> tuple[str | None, ConsoleLogin | None]:
    """The secret the request authenticates with, and the console login it
    came in, if it came in one."""
    header = request.headers.get("x-api-key")
    if header:
        return header.strip(), None
    authorization = request.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip(), None
    login = _console_login(request)
    return (None, None) if login is None else (login.key, login)


def _presented_key(request: HTTPConnection) -> str | None:
    return _presented(request)[0]


def console_cookie(request: HTTPConnection) -> ConsoleLogin | None:
    """The login this installation sealed in the request's console cookie."""
    cookie = request.cookies.get(CONSOLE_COOKIE)
    if not cookie:
        return None
    try:
        login = services(request).secrets.open(CONSOLE_LOGIN, base64.urlsafe_b64decode(cookie))
    except (SealError, ValueError):
        return None  # not a login this installation made (a raw key of before, say)
    key, token, at = login.get("key"), login.get("token"), login.get("at")
    if not (isinstance(key, str) and isinstance(token, str) and isinstance(at, int | float)):
        return None
    return ConsoleLogin(key, token, float(at))


def _console_login(request: HTTPConnection) -> ConsoleLogin | None:
    """The console's login, when the request shows it came from the console's
    own pages: the login's token in the console's header (a WebSocket: in its
    query, from an ``Origin`` naming this very host), the login not older than
    ``CONSOLE_LOGIN_SECONDS``. Whether it was ended by logging out is the
    store's to say (``authenticate``)."""
    if not request.cookies.get(CONSOLE_COOKIE):
        return None
    if request.scope["type"] == "websocket":
        presented = request.query_params.get(CONSOLE_TOKEN_QUERY)
        if not same_origin(request):
            return None
    else:
        presented = request.headers.get(CONSOLE_HEADER)
        origin = request.headers.get("origin")
        if origin is not None and not same_origin(request):
            return None
    login = console_cookie(request)
    if login is None or not presented:
        return None
    if not hmac.compare_digest(presented.encode(), login.token.encode()):
        return None
    # A little of the future: another process of a shared store may have made it.
    age = time.time() - login.at
    return login if -CLOCK_SKEW_SECONDS <= age <= CONSOLE_LOGIN_SECONDS else None


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
    secret, login = _presented(request)
    if secret is None:
        raise ApiError(401, "send an API key as 'x-api-key' or 'Authorization: Bearer <key>'")
    app = services(request)
    if login is not None and await app.store.console_login_ended(login.token_hash):
        raise ApiError(401, "this console login ended: log in again")
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


REAUTHENTICATE_SECONDS = 5.0
"""How often a long-lived connection (a terminal's WebSocket, an event stream)
authenticates its caller again: a console login ended (a logout, in any tab or
process) or a key revoked (within the key cache's time) ends what it opened
before, not only its next request."""


async def refusal(connection: HTTPConnection) -> ApiError | None:
    """Why the caller of a connection open for a while is refused now (a 401 or
    403), or None; None too while the store cannot say."""
    try:
        await authenticate(connection)
    except ApiError as exc:
        return exc if exc.status in (401, 403) else None
    except StoreError:
        return None
    return None


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
