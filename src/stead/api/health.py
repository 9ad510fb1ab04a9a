"""``/healthz``, ``/readyz`` and ``/metrics``: for load balancers and scrapers.

``/healthz`` answers while the process serves HTTP; ``/readyz`` also asks the
store, the blob store and (``STEAD_SANDBOX=bwrap``) the sandbox host, and
answers 503 naming what failed. Neither needs an API key. ``/metrics`` is the Prometheus text of
this process, readable as ``STEAD_METRICS`` says (``key`` by default).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import Response

from stead import sandbox
from stead.api import openapi
from stead.api.deps import authenticate, services
from stead.api.errors import ApiError
from stead.api.wire import JSONResponse
from stead.config import Settings
from stead.sandbox import host_address
from stead.store import Store, StoreError
from stead.telemetry import CONTENT_TYPE, Metrics, Telemetry

router = APIRouter(tags=["operations"])
READY_PROBE = "readyz/probe"
CHECK_SECONDS = 5.0
"""Longest a readiness check or a scrape waits for the store, or the sandbox host."""
PUBLIC: dict[str, Any] = {"security": []}
CHECKS_SCHEMA = {
    "type": "object",
    "required": ["status", "checks"],
    "properties": {
        "status": {"enum": ["ready", "unready"]},
        "checks": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}


def telemetry(request: Request) -> Telemetry:
    return request.app.state.telemetry  # type: ignore[no-any-return]


@router.get("/healthz", openapi_extra=PUBLIC, summary="The process is up")
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get(
    "/readyz",
    openapi_extra=PUBLIC,
    summary="The store, the blob store and the sandbox host answer",
    responses={
        200: {"content": {"application/json": {"schema": CHECKS_SCHEMA}}},
        503: {
            "description": "A part stead needs does not answer: ``checks`` names it",
            "content": {"application/json": {"schema": CHECKS_SCHEMA}},
        },
    },
)
async def readyz(request: Request) -> JSONResponse:
    app = services(request)
    checks = {"store": await _store_check(request), "blobs": await _blob_check(request)}
    if app.settings.sandbox == "bwrap":
        checks["sandbox_host"] = await _host_check(app.settings)
    ready = all(found == "ok" or found.startswith("ok:") for found in checks.values())
    body = {"status": "ready" if ready else "unready", "checks": checks}
    return JSONResponse(body, status_code=200 if ready else 503)


async def _store_check(request: Request) -> str:
    return await _answers(services(request).store.count_api_keys)


async def _blob_check(request: Request) -> str:
    """Asks the blob store (files, skills, memories) about a key it never holds."""
    return await _answers(lambda: services(request).files.blob_store().head(READY_PROBE))


async def _answers(ask: Callable[[], Awaitable[object]]) -> str:
    """``ok``, or why ``ask`` did not answer within ``CHECK_SECONDS``."""
    try:
        with anyio.fail_after(CHECK_SECONDS):
            await ask()
    except TimeoutError:
        return f"no answer within {CHECK_SECONDS:g}s"
    except Exception as exc:  # any failure of the part is the answer, not a 500
        return f"failed: {type(exc).__name__}"
    return "ok"


async def _host_status(settings: Settings) -> sandbox.HostStatus | None:
    """The sandbox host's status; None when it did not answer within
    ``CHECK_SECONDS`` (a host that takes the hello and never the ping would
    hold a probe or a scrape for the client's whole call timeout)."""
    with anyio.move_on_after(CHECK_SECONDS):
        return await sandbox.host_status(host_address(settings))  # its client, loaded now
    return None


async def _host_check(settings: Settings) -> str:
    address = host_address(settings)
    found = await _host_status(settings)
    if found is None:
        return f"no answer within {CHECK_SECONDS:g}s"
    if found.answer is not None:
        return "ok"
    if found.other_version:  # left running across an upgrade: no autostart replaces it
        return f"another stead version: {found.problem} (stead sandbox-host stop stops it)"
    if settings.sandbox_host_autostart and address.unix_path is not None:
        # This server starts its local host at the first tool call or terminal.
        return "ok: not started yet; starts on first use"
    return f"unreachable: {found.problem}"


@router.get(
    "/metrics",
    summary="Prometheus metrics of this process",
    response_class=Response,
    responses={
        200: {"content": {CONTENT_TYPE: {"schema": {"type": "string"}}}},
        **openapi.errors(404),
    },
)
async def metrics(request: Request) -> Response:
    app = services(request)
    if app.settings.metrics == "off":
        raise ApiError(404, "metrics are off (STEAD_METRICS=off)")
    if app.settings.metrics == "key":
        await authenticate(request)
    found = telemetry(request).metrics
    found.sandboxes_served.set(app.sandboxes.served)
    # The store and the host are asked at once, each for CHECK_SECONDS at most.
    async with anyio.create_task_group() as group:
        group.start_soon(_count_queued, app.store, found)
        if app.settings.sandbox == "bwrap":
            group.start_soon(_count_host, app.settings, found)
    return Response(found.render(), media_type=CONTENT_TYPE)


async def _count_queued(store: Store, found: Metrics) -> None:
    # A store that cannot answer now leaves the gauge as it was: the scrape
    # still serves every other figure, when they matter most.
    with anyio.move_on_after(CHECK_SECONDS), contextlib.suppress(StoreError):
        found.queued_runs.set(len(await store.queued_runs()))


async def _count_host(settings: Settings, found: Metrics) -> None:
    """The host's counts; none of them while it does not answer."""
    host = await _host_status(settings)
    answer = host.answer if host is not None else None
    found.set_sandboxes(None if answer is None else answer.get("sandboxes") or {})
    found.host.update(None if answer is None else answer.get("metrics"))
