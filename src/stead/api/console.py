"""``/console``: the browser console's pages, its browser packages, and the
login that keeps an API key, sealed, in a cookie.

The pages are files of ``stead.console``; once logged in they call the public
API (``/v1/...``) like any client, with the login in an HttpOnly,
SameSite=Strict cookie that ``deps.authenticate`` accepts only beside the
login's token in the console's own header (for a terminal's WebSocket, in its
query, from this host's own origin). The page keeps the token in its
``localStorage``: a page on another port of this host gets the cookie (cookies
ignore ports) but not the token, so it can neither use the login nor plant
one of its own. Logging in and out need the header too, so another site can
neither log a browser in nor out.
"""

from __future__ import annotations

import time
from pathlib import PurePosixPath

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, RedirectResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.staticfiles import NotModifiedResponse, StaticFiles
from starlette.types import Scope

from stead.api.body import json_body
from stead.api.deps import (
    CONSOLE_COOKIE,
    CONSOLE_HEADER,
    CONSOLE_LOGIN_SECONDS,
    console_cookie,
    console_login,
    services,
)
from stead.api.errors import ApiError
from stead.api.wire import JSONResponse
from stead.console import assets_dir, vendor_file
from stead.schemas import RequestError
from stead.store import TOKEN_PREFIX

PREFIX = "/console"
NO_STORE = {"cache-control": "no-store"}
PAGE_HEADERS = NO_STORE | {
    "content-security-policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
        "frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
}
"""Scripts from this server only; no framing, so no click-jacking of the buttons."""
REVALIDATE = {"cache-control": "no-cache"}
"""The console's files, kept by the browser but asked for again (an ETag's 304)
each time: without it a browser reused them unasked for days (a heuristic of
their age), so after an upgrade of stead the new page ran the old scripts."""
ASSET_HEADERS = REVALIDATE | {
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "content-security-policy": "frame-ancestors 'none'",
}

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.get("")
async def console_root() -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/", status_code=307)


@router.get("/")
async def console_page() -> FileResponse:
    return FileResponse(assets_dir() / "index.html", headers=PAGE_HEADERS)


@router.get("/vendor/{name}")
async def vendor(request: Request, name: str) -> Response:
    path = vendor_file(name)
    if path is None:
        raise ApiError(404, f"no console package file {name!r} (./scripts/setup installs them)")
    headers = REVALIDATE | {"x-content-type-options": "nosniff"}
    response = FileResponse(path, headers=headers, stat_result=path.stat())
    if request.headers.get("if-none-match") == response.headers["etag"]:
        return NotModifiedResponse(Headers(raw=response.raw_headers))
    return response


@router.post("/login")
async def login(request: Request) -> JSONResponse:
    _require_console_header(request)
    body = await json_body(request)
    secret = body.get("api_key") if isinstance(body, dict) else None
    if not isinstance(secret, str) or not secret.strip():
        raise RequestError("api_key: a string is required")
    secret = secret.strip()
    store = services(request).store
    # A worker's sessions token is good for one session's routes, never a console.
    key = None if secret.startswith(TOKEN_PREFIX) else await store.authenticate(secret)
    if key is None:
        raise ApiError(401, "api_key: invalid API key")
    cookie, token = console_login(services(request).secrets, secret, time.time())
    answer = {"type": "console_login", "workspace_id": key.workspace_id, "console_token": token}
    response = JSONResponse(answer)
    response.set_cookie(
        CONSOLE_COOKIE,
        cookie,
        max_age=CONSOLE_LOGIN_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    response.headers.update(NO_STORE)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    """Ends the login for every process, not only in this browser: its cookie
    and token, if copied, authorise nothing after this."""
    _require_console_header(request)
    login = console_cookie(request)
    if login is not None:
        await services(request).store.end_console_login(login.token_hash, login.expires_at)
    response = Response(status_code=204, headers=NO_STORE)
    response.delete_cookie(CONSOLE_COOKIE, path="/", httponly=True, samesite="strict")
    return response


def _require_console_header(request: Request) -> None:
    """Logging in and out: the header (any value: before a login the page has no
    token), which another site cannot send."""
    if not request.headers.get(CONSOLE_HEADER):
        raise ApiError(403, f"{CONSOLE_HEADER}: the console's requests carry this header")


class _Assets(StaticFiles):
    """The page's scripts and styles. Not the page: served from here it would
    come without ``PAGE_HEADERS``, and a page of another port of this host
    (same-site, so the cookie goes with it) could frame it and click its
    buttons; nothing here may be framed."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        if PurePosixPath(path).name == "index.html":
            raise HTTPException(status_code=404)
        response = await super().get_response(path, scope)
        response.headers.update(ASSET_HEADERS)
        return response


def install(app: FastAPI) -> None:
    """The pages and their files; the routes are in ``router``."""
    app.mount(f"{PREFIX}/static", _Assets(directory=assets_dir()), name="console-static")
