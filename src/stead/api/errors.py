"""The one boundary where failures become the Anthropic error envelope.

    ApiError                 raised by routes for HTTP-level problems (auth, size)
    schemas.RequestError  -> 400 invalid_request_error
    store.NotFound        -> 404 not_found_error
    store.InvalidValue    -> 400 (a value the store refused: nothing was written)
    store.Conflict        -> its status (409 unless the spec says 400), x-should-retry: false
    store.DatabaseBusy    -> 503, x-should-retry: true (the database is away or busy; logged)
    store.StaleSecretKey  -> 503 (this server's key is not the database's: restart it; logged)
    vault.SealError       -> 503 (a stored secret this server's key cannot open; logged)
    blobs.BlobUnavailable -> 503 (the blob store did not answer in time; retryable)
    blobs.BlobError       -> 500, logged (a blob a visible file names is missing or refused)
    RequestValidationError-> 400 (query and path parameters)
    Starlette HTTPException -> 404 unknown route, 405 wrong method (with ``Allow``)
    anything else         -> 500 api_error, logged with the request id

Every envelope carries ``request_id`` and the response a ``request-id`` header.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from stead.api.wire import JSONResponse
from stead.blobs import BlobError, BlobUnavailable
from stead.ids import new_id
from stead.schemas import RequestError
from stead.store import Conflict, DatabaseBusy, InvalidValue, NotFound, StaleSecretKey
from stead.telemetry import FIELDS
from stead.vault import SealError

log = logging.getLogger("stead.api")

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    409: "invalid_request_error",
    412: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
}
DATABASE_RETRY_AFTER_SECONDS = 1


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.details = details
        """More of ``error.details`` beside ``error_code``."""
        super().__init__(message)


def request_id(request: Request) -> str:
    state = request.scope.setdefault("state", {})
    if "request_id" not in state:
        state["request_id"] = new_id("request")
    return str(state["request_id"])


def error_response(
    request: Request,
    status: int,
    message: str,
    *,
    code: str | None = None,
    headers: dict[str, str] | None = None,
    details: dict[str, Any] | None = None,
) -> JSONResponse:
    rid = request_id(request)
    error: dict[str, Any] = {
        "type": ERROR_TYPES.get(status, "invalid_request_error"),
        "message": message,
    }
    if code:
        error["details"] = {"error_code": code, **(details or {})}
    return JSONResponse(
        {"type": "error", "error": error, "request_id": rid},
        status_code=status,
        headers={"request-id": rid, **(headers or {})},
    )


def _field_of(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("query", "path", "header", "body")]
    return ".".join(parts) or "request"


async def _request_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestError)
    return error_response(request, 400, str(exc), code=exc.code)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    headers = {"x-should-retry": "false"} if exc.status == 412 else None
    return error_response(
        request, exc.status, str(exc), code=exc.code, headers=headers, details=exc.details
    )


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, NotFound)
    # The SDK's BetaEnvironmentNotFoundError; its thread_not_found is the Messages
    # API's threads', not a session's, so a session thread's 404 carries no code.
    code = "environment_not_found" if exc.kind == "environment" else None
    return error_response(request, 404, str(exc), code=code)


async def _invalid_value(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InvalidValue)
    return error_response(request, 400, str(exc))


async def _conflict(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Conflict)
    headers = {"x-should-retry": "false"} if exc.status == 409 else None
    return error_response(
        request, exc.status, str(exc), code=exc.code, headers=headers, details=exc.details
    )


async def _database_busy(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DatabaseBusy)
    return database_busy(request, exc)


def database_busy(request: Request, exc: DatabaseBusy) -> JSONResponse:
    """The retryable 503 of a request the database could not serve now (also
    for middleware, which runs outside these handlers)."""
    # The driver's words stay in the log: they name hosts a client has no business seeing.
    log.warning("database busy in %s %s: %s", request.method, _route(request), exc)
    return error_response(
        request,
        503,
        "the database cannot serve this request now; retry it shortly",
        headers={"x-should-retry": "true", "retry-after": str(DATABASE_RETRY_AFTER_SECONDS)},
    )


async def _stale_secret_key(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StaleSecretKey)
    # Both keys' ids are the operator's to read in the log; the client learns what to do.
    log.error("a secret was not stored in %s %s: %s", request.method, _route(request), exc)
    return error_response(
        request,
        503,
        "this server's secret key is not the database's (the key was rotated), so it stores "
        "no secret: nothing was written. The server must be restarted with the current "
        "STEAD_SECRET_KEY",
    )


async def _unopened_secret(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SealError)
    # A route read a stored secret (an auth update, a credential's validation)
    # that this server's keys cannot open: sealed since under a rotated key, most
    # likely, as with StaleSecretKey; the error names no secret either way.
    log.error(
        "a stored secret could not be opened in %s %s: %s", request.method, _route(request), exc
    )
    return error_response(
        request,
        503,
        "this server cannot open a secret the database holds (it is sealed under a key "
        "this server does not have: the key was rotated, or the server was started with "
        "another): nothing was written. The server must be restarted with the current "
        "STEAD_SECRET_KEY",
    )


def _route(request: Request) -> str:
    route = request.scope.get("route")
    return str(getattr(route, "path", "(no route)"))


async def _blob(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, BlobError)
    rid = request_id(request)
    if isinstance(exc, BlobUnavailable):
        # What the store's client said names its endpoint, bucket and keys: the
        # operator's to read in the log, not every API client's.
        log.warning(
            "blob store unavailable in %s %s (request %s): %s",
            request.method,
            request.url.path,
            rid,
            exc,
        )
        return error_response(
            request, 503, f"the blob store cannot be reached now (request {rid}); retry shortly"
        )
    log.error(
        "blob store error in %s %s (request %s): %s", request.method, request.url.path, rid, exc
    )
    return error_response(
        request, 500, f"blob store error; quote request id {rid} when reporting it"
    )


async def _validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0]
    message = str(first["msg"]).removeprefix("Value error, ")
    return error_response(request, 400, f"{_field_of(first['loc'])}: {message}")


async def _http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = None
    if exc.status_code == 404:
        message = f"no route for {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"method {request.method} is not allowed on {request.url.path}"
        headers = {"allow": ", ".join(_allowed_methods(request))}
    else:
        message = str(exc.detail)
    return error_response(request, exc.status_code, message, headers=headers)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route answers on this path. Routes sit straight on the app,
    one per method, so the 405 Starlette raises names only the first one's."""
    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    rid = request_id(request)
    # Starlette runs this handler outermost, past RequestIdMiddleware's
    # ``serving_request``: the line names its request itself.
    log.exception(
        "unhandled error in %s %s (request %s)",
        request.method,
        request.url.path,
        rid,
        extra={FIELDS: {"request_id": rid}},
    )
    return error_response(request, 500, f"internal error; quote request id {rid} when reporting it")


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestError, _request_error)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(NotFound, _not_found)
    app.add_exception_handler(InvalidValue, _invalid_value)
    app.add_exception_handler(Conflict, _conflict)
    app.add_exception_handler(DatabaseBusy, _database_busy)
    app.add_exception_handler(StaleSecretKey, _stale_secret_key)
    app.add_exception_handler(SealError, _unopened_secret)
    app.add_exception_handler(BlobError, _blob)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(Exception, _unexpected)
