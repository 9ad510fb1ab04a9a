"""/v1/sessions/{id}/sandbox: a session's sandbox, stead's own addition to the API.

``GET`` shows its lease (rule 9: with the sandbox host holding it) and its
state in that host without renewing, acquiring or waking anything. ``DELETE``
releases it: the lease ends explicitly and the sweeper destroys the sandbox
after a final snapshot; the session's next tool call or terminal takes a new
lease and gets its workspace back. A running session is refused (409): its
tools are using the sandbox.
``GET .../egress`` pages through the audit log of the sandbox's egress proxy.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from stead.api import openapi
from stead.api.deps import Caller, caller, services
from stead.api.errors import ApiError
from stead.api.params import SessionId
from stead.api.wire import JSONResponse, ts
from stead.runtime import SandboxView
from stead.sandbox import SandboxError

router = APIRouter(prefix="/v1/sessions/{session_id}/sandbox", tags=["sandbox"])

BUSY = ("running", "rescheduling")


@router.get("")
async def retrieve_sandbox(
    request: Request, session_id: SessionId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    await app.store.get_session(who.workspace_id, session_id)  # 404 for another workspace
    return JSONResponse(_json(session_id, await app.sandboxes.describe(session_id)))


@router.delete("", responses=openapi.errors(409))
async def release_sandbox(
    request: Request, session_id: SessionId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    session = await app.store.get_session(who.workspace_id, session_id)
    if session.status in BUSY:
        raise ApiError(
            409,
            f"session {session_id} is {session.status}: its tools are using the sandbox; "
            "interrupt it or wait until it is idle",
        )
    if await app.sandboxes.release(session_id) and app.sweeper is not None:
        app.sweeper.poke()
    return JSONResponse(_json(session_id, await app.sandboxes.describe(session_id)))


@router.get("/egress", responses=openapi.errors(503))
async def egress_log(
    request: Request,
    session_id: SessionId,
    after: int = Query(0, ge=0, le=2**62),
    limit: int = Query(100, ge=1, le=1000),
    who: Caller = Depends(caller),
) -> JSONResponse:
    """Requests the session's sandbox sent out through its egress proxy after entry
    ``after``, oldest first: host, port, method, status, bytes each way, the ids
    of the credentials injected (never a value) and any refusal. Kept in the
    sandbox host's memory (the newest entries of each sandbox, until the host
    restarts); empty where sandboxes have no egress proxy (``unsafe_local``,
    ``off``) or the session has no sandbox yet."""
    app = services(request)
    await app.store.get_session(who.workspace_id, session_id)  # 404 for another workspace
    try:
        log = await app.sandboxes.egress_audit(session_id, after, limit)
    except SandboxError as exc:
        raise ApiError(503, f"the sandbox host cannot be asked: {exc}") from None
    entries = [] if log is None else log["entries"]
    last = after if log is None else log["last_seq"]
    return JSONResponse(
        {"type": "sandbox_egress_log", "session_id": session_id, "data": entries, "last_seq": last}
    )


def _json(session_id: str, view: SandboxView) -> dict[str, Any]:
    lease, host = view.lease, view.host or {}
    return {
        "type": "session_sandbox",
        "session_id": session_id,
        "lease": None
        if lease is None
        else {
            "status": lease.status.value,
            "expiry_reason": None if lease.expiry_reason is None else lease.expiry_reason.value,
            "ttl_seconds": lease.ttl_seconds,
            "created_at": ts(lease.created_at),
            "last_activity_at": ts(lease.last_activity_at),
            "expires_at": ts(lease.expires_at),
            "expired_at": ts(lease.expired_at),
            "destroyed_at": ts(lease.destroyed_at),
            # Which sandbox host holds it (None: none yet, or destroyed), where
            # other processes reach that host, and how often it was placed.
            "host_id": lease.host_id,
            "host_address": lease.host_address,
            "placement": lease.placement,
        },
        "state": host.get("state"),
        "active_seconds": round(view.active_seconds, 3),
        "idle_seconds": host.get("idle_seconds"),
        "processes": host.get("processes", []),
        "terminals": host.get("terminals", 0),
        "last_error": view.error or host.get("last_error"),
    }
