"""``/v1/stead/webhooks``: the caller's workspace's webhook endpoints (stead's own
admin routes; the SDK only verifies deliveries, with ``beta.webhooks.unwrap``).

Create answers with the signing secret, once; ``rotate_secret`` answers with a
new one. ``deliveries`` lists the newest deliveries with every attempt.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from stead.api import openapi
from stead.api.body import json_body
from stead.api.deps import Caller, caller, services
from stead.api.params import ID_PATTERN
from stead.api.wire import JSONResponse, ts
from stead.jsonvalues import Json
from stead.schemas import webhooks
from stead.store import DeliveryState, WebhookDelivery, WebhookEndpoint

router = APIRouter(prefix="/v1/stead/webhooks", tags=["webhooks"])
WebhookId = Annotated[str, Path(pattern=ID_PATTERN)]
MAX_DELIVERIES = 100


def endpoint_json(endpoint: WebhookEndpoint) -> Json:
    return {
        "type": "webhook_endpoint",
        "id": endpoint.id,
        "url": endpoint.url,
        "description": endpoint.description,
        "event_types": list(endpoint.event_types),
        "status": "enabled" if endpoint.enabled else "disabled",
        "created_at": ts(endpoint.created_at),
        "updated_at": ts(endpoint.updated_at),
    }


def delivery_json(delivery: WebhookDelivery) -> Json:
    return {
        "type": "webhook_delivery",
        "id": delivery.id,
        "event_id": delivery.event_id,
        "event_type": delivery.event_type,
        "state": delivery.state.value,
        "attempts": [
            {
                "attempt": t.attempt,
                "at": ts(t.at),
                "status_code": t.status_code,
                "error": t.error,
            }
            for t in delivery.tries
        ],
        "next_attempt_at": ts(delivery.next_attempt_at)
        if delivery.state is DeliveryState.PENDING
        else None,
        "created_at": ts(delivery.created_at),
        "finished_at": ts(delivery.finished_at),
    }


@router.post("", responses=openapi.errors(400), openapi_extra=openapi.body("WebhookCreateParams"))
async def create_webhook(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    fields = webhooks.parse_create(await json_body(request))
    endpoint, secret = await services(request).webhooks.create(who.workspace_id, fields)
    return JSONResponse({**endpoint_json(endpoint), "secret": secret})


@router.get("")
async def list_webhooks(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    found = await services(request).store.list_webhook_endpoints(who.workspace_id)
    return JSONResponse({"data": [endpoint_json(e) for e in found], "has_more": False})


@router.get("/{webhook_id}")
async def retrieve_webhook(
    request: Request, webhook_id: WebhookId, who: Caller = Depends(caller)
) -> JSONResponse:
    endpoint = await services(request).store.get_webhook_endpoint(who.workspace_id, webhook_id)
    return JSONResponse(endpoint_json(endpoint))


@router.post("/{webhook_id}", openapi_extra=openapi.body("WebhookUpdateParams"))
async def update_webhook(
    request: Request, webhook_id: WebhookId, who: Caller = Depends(caller)
) -> JSONResponse:
    fields = webhooks.parse_update(await json_body(request))
    endpoint = await services(request).webhooks.update(who.workspace_id, webhook_id, fields)
    return JSONResponse(endpoint_json(endpoint))


@router.delete("/{webhook_id}")
async def delete_webhook(
    request: Request, webhook_id: WebhookId, who: Caller = Depends(caller)
) -> JSONResponse:
    await services(request).store.delete_webhook_endpoint(who.workspace_id, webhook_id)
    return JSONResponse({"id": webhook_id, "type": "webhook_endpoint_deleted"})


@router.post("/{webhook_id}/rotate_secret")
async def rotate_webhook_secret(
    request: Request, webhook_id: WebhookId, who: Caller = Depends(caller)
) -> JSONResponse:
    endpoint, secret = await services(request).webhooks.rotate_secret(who.workspace_id, webhook_id)
    return JSONResponse({**endpoint_json(endpoint), "secret": secret})


@router.get("/{webhook_id}/deliveries")
async def list_webhook_deliveries(
    request: Request,
    webhook_id: WebhookId,
    limit: int = Query(20, ge=1, le=MAX_DELIVERIES),
    who: Caller = Depends(caller),
) -> JSONResponse:
    found = await services(request).store.list_webhook_deliveries(
        who.workspace_id, webhook_id, limit
    )
    return JSONResponse({"data": [delivery_json(d) for d in found]})
