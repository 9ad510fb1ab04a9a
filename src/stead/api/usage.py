"""stead's own routes beside the API: the workspace's usage ledger, and ending a
session for good.

``GET /v1/usage?from=&to=`` lists the caller's workspace's usage by UTC day,
session and model (sandbox time has ``model: null``), with the totals, from
the ledger the agent loop writes with each model request and sandbox booking.
``POST /v1/sessions/{id}/terminate`` ends an idle session: ``terminated_at``
set, ``session.status_terminated`` logged, events refused after (409), and its
sandbox lease expired by the sweeper, which destroys the sandbox (an unleased
``unsafe_local`` sandbox goes at once).
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from fastapi import APIRouter, Depends, Query, Request

from stead import usage as accounting
from stead.api import openapi, wire
from stead.api.deps import Caller, caller, services
from stead.api.errors import ApiError
from stead.api.params import SessionId
from stead.api.wire import JSONResponse
from stead.jsonvalues import Json
from stead.store import LedgerRow

router = APIRouter(tags=["usage"])

MAX_DAYS = 366


@router.get("/v1/usage", responses=openapi.errors(400))
async def usage_report(
    request: Request,
    first: date | None = Query(None, alias="from", description="First UTC day, included."),
    last: date | None = Query(None, alias="to", description="Last UTC day, included."),
    who: Caller = Depends(caller),
) -> JSONResponse:
    last = last or datetime.now(UTC).date()
    first = first or last
    if first > last or (last - first).days >= MAX_DAYS:
        raise ApiError(400, f"from..to: at most {MAX_DAYS} days, from not after to")
    rows = await services(request).store.usage_ledger(who.workspace_id, first, last)
    total: dict[str, float] = {}
    for row in rows:
        total = accounting.added(total, {**row.counters, "active_seconds": row.active_seconds})
    return JSONResponse(
        {
            "type": "usage_report",
            "from": first.isoformat(),
            "to": last.isoformat(),
            "data": [_row(row) for row in rows],
            "total": accounting.report(total),
        }
    )


def _row(row: LedgerRow) -> Json:
    body = {**row.counters, "active_seconds": row.active_seconds}
    return {
        "day": row.day.isoformat(),
        "session_id": row.session_id,
        "model": row.model,
        **accounting.report(body),
    }


@router.post("/v1/sessions/{session_id}/terminate", responses=openapi.errors(409))
async def terminate_session(
    request: Request, session_id: SessionId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    logged = await app.store.terminate_session(who.workspace_id, session_id, [])
    app.bus.publish(session_id, logged)
    await app.sandboxes.session_ended(session_id)
    if app.sweeper is not None:
        app.sweeper.poke()  # its lease ends now: the sandbox goes at once
    record = await app.store.get_session(who.workspace_id, session_id)
    return JSONResponse(wire.session(record, datetime.now(UTC)))
