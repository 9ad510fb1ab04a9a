"""/v1/environments/{id}/work: the work queue of a self-hosted environment (spec §2.3),
and /v1/environments/{id}/keys, the environment keys its workers present.

Who may call what: workers poll, ack and list with the environment key; a
claimed item's heartbeat and stop take its sessions token (from the poll's
``secret``) or the key; retrieve, update and stats take an API key, and stop
does too. A key of another environment is refused (403), an unknown or revoked
one is not authenticated (401).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Header, Query, Request

from stead.api import openapi, pagination, wire
from stead.api.body import json_body
from stead.api.deps import Caller, _presented_key, authenticate, services
from stead.api.errors import ApiError
from stead.api.params import EnvironmentId, ResourceId
from stead.api.wire import JSONResponse
from stead.jsonvalues import Json
from stead.schemas import RequestError
from stead.schemas import work as work_schemas
from stead.store import (
    ENVIRONMENT_KEY_PREFIX,
    TOKEN_PREFIX,
    EnvironmentKey,
    HeartbeatRefused,
    WorkItem,
)

router = APIRouter(prefix="/v1/environments/{environment_id}", tags=["environment work"])

KEY, TOKEN, API = "environment key", "sessions token", "API key"
DEFAULT_RECLAIM_MS = 5000
MAX_WORKER_ID = 200


@dataclass(frozen=True)
class Worker:
    workspace_id: str
    kind: str
    epoch: int | None = None
    """The claim a sessions token was issued for."""
    key_id: str | None = None
    """The environment key it presented."""


async def _worker(
    request: Request, environment_id: str, allowed: tuple[str, ...], work_id: str | None = None
) -> Worker:
    secret = _presented_key(request)
    app = services(request)
    if secret is not None and secret.startswith(ENVIRONMENT_KEY_PREFIX):
        key = await app.store.authenticate_environment_key(secret)
        if key is None:
            raise ApiError(401, "invalid or revoked environment key")
        if key.environment_id != environment_id:
            raise ApiError(
                403, f"this environment key is for another environment, not {environment_id}"
            )
        who = Worker(key.workspace_id, KEY, key_id=key.id)
    elif secret is not None and secret.startswith(TOKEN_PREFIX):
        token = await app.store.authenticate_work_token(secret)
        if token is None:
            raise ApiError(401, "invalid sessions token, or its claim ended")
        if token.environment_id != environment_id or token.work_id != work_id:
            raise ApiError(403, f"this sessions token is for work item {token.work_id} only")
        who = Worker(token.workspace_id, TOKEN, token.epoch)
    else:
        caller = await authenticate(request)
        who = Worker(caller.workspace_id, API)
    if who.kind not in allowed:
        raise ApiError(403, f"this call takes {' or '.join(allowed)}, not an {who.kind}")
    return who


def _work(item: WorkItem, secret: str | None = None) -> Json:
    return {
        "type": "work",
        "id": item.id,
        "environment_id": item.environment_id,
        "state": item.state,
        "data": {"type": "session", "id": item.session_id},
        "metadata": item.metadata,
        "secret": secret,
        "created_at": wire.ts(item.created_at),
        "acknowledged_at": wire.ts(item.acknowledged_at),
        "started_at": wire.ts(item.started_at),
        "latest_heartbeat_at": wire.ts(item.latest_heartbeat_at),
        "stop_requested_at": wire.ts(item.stop_requested_at),
        "stopped_at": wire.ts(item.stopped_at),
    }


def _secret(token: str) -> str:
    """The poll's ``secret``: URL-safe base64 (no padding) of the item's tokens."""
    payload = json.dumps({"sessions_token": token, "session_ingress_token": token})
    return base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")


def _lease(item: WorkItem, extended: bool) -> Json:
    return {
        "last_heartbeat": item.last_heartbeat,
        "lease_extended": extended,
        "state": item.state,
        "ttl_seconds": round(item.ttl_seconds),
    }


@router.get("/work/poll")
async def poll_work(
    request: Request,
    environment_id: EnvironmentId,
    block_ms: int | None = Query(None, ge=1, le=999),
    reclaim_older_than_ms: int = Query(DEFAULT_RECLAIM_MS, ge=0, le=86_400_000),
    worker_id: str | None = Header(None, alias="Anthropic-Worker-ID"),
) -> JSONResponse:
    who = await _worker(request, environment_id, (KEY,))
    if worker_id is not None and len(worker_id) > MAX_WORKER_ID:
        raise RequestError(f"Anthropic-Worker-ID: at most {MAX_WORKER_ID} characters")
    app = services(request)
    queue = app.runtime.work
    queue.polled(environment_id, worker_id)

    async def claim() -> Any:
        return await app.store.poll_work(
            who.workspace_id, environment_id, worker_id, reclaim_older_than_ms / 1000, who.key_id
        )

    claimed = await claim()
    if claimed is None and block_ms is not None:
        await queue.wait_for_work(environment_id, block_ms / 1000)
        claimed = await claim()
    if claimed is None:
        return JSONResponse(None)
    accepted = await queue.settle(claimed.item)
    if accepted is not None and accepted.starts_work and claimed.item.session_id:
        app.runtime.committed(claimed.item.session_id, queued=True)
    return JSONResponse(_work(claimed.item, _secret(claimed.token)))


@router.get("/work/stats")
async def work_stats(request: Request, environment_id: EnvironmentId) -> JSONResponse:
    who = await _worker(request, environment_id, (API,))
    app = services(request)
    stats = await app.store.work_stats(who.workspace_id, environment_id)
    return JSONResponse(
        {
            "type": "work_queue_stats",
            "depth": stats.depth,
            "pending": stats.pending,
            "oldest_queued_at": wire.ts(stats.oldest_queued_at),
            "workers_polling": app.runtime.work.workers_polling(environment_id),
        }
    )


@router.get("/work")
async def list_work(
    request: Request,
    environment_id: EnvironmentId,
    limit: int = Query(20, ge=1, le=100),
    page: str | None = Query(None),
) -> JSONResponse:
    who = await _worker(request, environment_id, (KEY,))
    store = services(request).store
    body = await pagination.newest_first(
        request,
        Caller(workspace_id=who.workspace_id, key_id=""),
        f"work:{environment_id}",
        limit,
        page,
        lambda at: store.list_work(who.workspace_id, environment_id, at),
        _work,
    )
    return JSONResponse(body)


@router.get("/work/{work_id}")
async def retrieve_work(
    request: Request, environment_id: EnvironmentId, work_id: ResourceId
) -> JSONResponse:
    who = await _worker(request, environment_id, (API,))
    item = await services(request).store.get_work(who.workspace_id, environment_id, work_id)
    return JSONResponse(_work(item))


@router.post("/work/{work_id}", openapi_extra=openapi.body("WorkUpdateParams"))
async def update_work(
    request: Request, environment_id: EnvironmentId, work_id: ResourceId
) -> JSONResponse:
    who = await _worker(request, environment_id, (API,))
    patch = work_schemas.metadata_patch(await json_body(request))
    item = await services(request).store.update_work_metadata(
        who.workspace_id, environment_id, work_id, patch
    )
    return JSONResponse(_work(item))


@router.post("/work/{work_id}/ack")
async def ack_work(
    request: Request, environment_id: EnvironmentId, work_id: ResourceId
) -> JSONResponse:
    who = await _worker(request, environment_id, (KEY, TOKEN), work_id)
    item = await services(request).store.ack_work(who.workspace_id, environment_id, work_id)
    return JSONResponse(_work(item))


@router.post("/work/{work_id}/heartbeat")
async def heartbeat_work(
    request: Request,
    environment_id: EnvironmentId,
    work_id: ResourceId,
    desired_ttl_seconds: int | None = Query(None, ge=1, le=86_400),
    expected_last_heartbeat: str | None = Query(None, min_length=1, max_length=64),
) -> JSONResponse:
    who = await _stale_aware_worker(request, environment_id, work_id)
    app = services(request)
    ttl = float(desired_ttl_seconds or app.settings.work_lease_seconds)
    ttl = min(ttl, app.settings.work_max_lease_seconds)
    try:
        item, extended = await app.store.heartbeat_work(
            who.workspace_id, environment_id, work_id, expected_last_heartbeat, ttl, who.epoch
        )
    except HeartbeatRefused as refused:
        raise ApiError(
            412,
            str(refused),
            code="heartbeat_precondition_failed",
            details={"current_state": _lease(refused.item, False)},
        ) from None
    return JSONResponse(
        {
            "type": "work_heartbeat",
            "last_heartbeat": item.last_heartbeat or "",
            "lease_extended": extended,
            "state": item.state,
            "ttl_seconds": round(item.ttl_seconds),
        }
    )


async def _stale_aware_worker(request: Request, environment_id: str, work_id: str) -> Worker:
    """A sessions token of an earlier claim of this very item is a lost lease
    (412 with the current state), not a stranger (401)."""
    secret = _presented_key(request) or ""
    if secret.startswith(f"{TOKEN_PREFIX}{work_id}."):
        token = await services(request).store.authenticate_work_token(secret)
        if token is None:
            raise ApiError(
                412,
                f"work {work_id} was claimed again or stopped, or the key it was polled with "
                "revoked, since this token was issued",
                code="heartbeat_precondition_failed",
            )
    return await _worker(request, environment_id, (KEY, TOKEN), work_id)


@router.post("/work/{work_id}/stop", openapi_extra=openapi.body("WorkStopParams", required=False))
async def stop_work(
    request: Request, environment_id: EnvironmentId, work_id: ResourceId
) -> JSONResponse:
    who = await _worker(request, environment_id, (KEY, TOKEN, API), work_id)
    force = work_schemas.stop_force(await json_body(request) if await request.body() else {})
    app = services(request)
    item = await app.store.stop_work(who.workspace_id, environment_id, work_id, force)
    accepted = await app.runtime.work.stopped(item)
    if accepted is not None and accepted.starts_work and item.session_id:
        app.runtime.committed(item.session_id, queued=True)
    return JSONResponse(_work(item))


# environment keys (stead's own: the hosted API makes them in its console)


def _key(record: EnvironmentKey, secret: str | None = None) -> Json:
    body: Json = {
        "type": "environment_key",
        "id": record.id,
        "environment_id": record.environment_id,
        "hint": record.hint,
        "created_at": wire.ts(record.created_at),
        "revoked_at": wire.ts(record.revoked_at),
    }
    if secret is not None:
        body["key"] = secret
    return body


@router.post("/keys")
async def create_environment_key(request: Request, environment_id: EnvironmentId) -> JSONResponse:
    who = await _worker(request, environment_id, (API,))
    record, secret = await services(request).store.create_environment_key(
        who.workspace_id, environment_id
    )
    return JSONResponse(_key(record, secret))


@router.post("/keys/{key_id}/revoke")
async def revoke_environment_key(
    request: Request, environment_id: EnvironmentId, key_id: ResourceId
) -> JSONResponse:
    who = await _worker(request, environment_id, (API,))
    record = await services(request).store.revoke_environment_key(
        who.workspace_id, environment_id, key_id
    )
    return JSONResponse(_key(record))
