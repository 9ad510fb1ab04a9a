"""Webhook endpoints, the outbox and its attempts in memory (``_webhooks.py``'s
rules: the outbox rows, the refusal of one endpoint too many and an attempt's
outcome are its functions). ``publish`` and ``publish_log`` run inside the write
that made their event, so the outbox changes with it or not at all."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar

from stead.store import _webhooks
from stead.store._webhooks import PENDING, PURGE_BATCH, check_room, log_raises, outbox_rows
from stead.store.errors import NotFound
from stead.store.events import EventRecord
from stead.store.inmemory.tables import DeliveryRow, EndpointRow, Tables, loaded, stored
from stead.store.inmemory.workspaces import check_sealed
from stead.store.webhooks import (
    AttemptResult,
    DueDelivery,
    RetryTerms,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WorkspaceScope,
)

POSITIONS = "webhook_deliveries"
R = TypeVar("R")


def create(
    t: Tables,
    now: datetime,
    workspace_id: str,
    endpoint_id: str,
    fields: Mapping[str, object],
    sealed_secret: bytes,
) -> WebhookEndpoint:
    if workspace_id not in t.workspaces:
        raise NotFound("workspace", workspace_id)
    check_room(sum(1 for row in t.webhook_endpoints.values() if _of(row, workspace_id)))
    check_sealed(t, sealed_secret)
    event_types = fields["event_types"]
    assert isinstance(event_types, Sequence)
    description = fields.get("description")
    endpoint = WebhookEndpoint(
        id=endpoint_id,
        workspace_id=workspace_id,
        url=str(fields["url"]),
        description=None if description is None else str(description),
        event_types=tuple(loaded(stored(list(event_types)))),
        enabled=True,
        created_at=now,
        updated_at=now,
    )
    t.webhook_endpoints[endpoint_id] = EndpointRow(endpoint, sealed_secret)
    return endpoint


def _of(row: EndpointRow, workspace_id: WorkspaceScope) -> bool:
    return workspace_id is None or row.endpoint.workspace_id == workspace_id


def _row(t: Tables, workspace_id: WorkspaceScope, endpoint_id: str) -> EndpointRow:
    row = t.webhook_endpoints.get(endpoint_id)
    if row is None or not _of(row, workspace_id):
        raise NotFound("webhook endpoint", endpoint_id)
    return row


def get(t: Tables, workspace_id: WorkspaceScope, endpoint_id: str) -> WebhookEndpoint:
    return _row(t, workspace_id, endpoint_id).endpoint


def list_(t: Tables, workspace_id: WorkspaceScope) -> list[WebhookEndpoint]:
    found = [row.endpoint for row in t.webhook_endpoints.values() if _of(row, workspace_id)]
    return sorted(found, key=lambda e: (e.created_at, e.id))


def update(
    t: Tables,
    now: datetime,
    workspace_id: WorkspaceScope,
    endpoint_id: str,
    change: Mapping[str, object],
    sealed_secret: bytes | None,
) -> WebhookEndpoint:
    row = _row(t, workspace_id, endpoint_id)
    check_sealed(t, sealed_secret)
    values: dict[str, object] = {**change, "updated_at": now}
    if "event_types" in values:
        values["event_types"] = tuple(loaded(stored(values["event_types"])))
    endpoint = replace(row.endpoint, **values)  # type: ignore[arg-type]
    sealed = row.sealed_secret if sealed_secret is None else sealed_secret
    t.webhook_endpoints[endpoint_id] = EndpointRow(endpoint, sealed)
    return endpoint


def delete(t: Tables, _now: datetime, workspace_id: WorkspaceScope, endpoint_id: str) -> None:
    _row(t, workspace_id, endpoint_id)
    for position, delivery in list(t.webhook_deliveries.items()):
        if delivery.endpoint_id == endpoint_id:
            del t.webhook_deliveries[position]
    del t.webhook_endpoints[endpoint_id]


def reseal(t: Tables, _now: datetime, resealed: Callable[[str, bytes], bytes | None]) -> int:
    changed = 0
    for endpoint_id, row in list(t.webhook_endpoints.items()):
        sealed = resealed(endpoint_id, row.sealed_secret)
        if sealed is not None:
            check_sealed(t, sealed)
            t.webhook_endpoints[endpoint_id] = replace(row, sealed_secret=sealed)
            changed += 1
    return changed


def publish(
    t: Tables, now: datetime, workspace_id: str, event_type: str, data: Mapping[str, object]
) -> None:
    """``_webhooks.publish``: the outbox rows of one event, one per enabled
    endpoint of the workspace subscribed to ``event_type``."""
    listening = [
        row.endpoint
        for row in t.webhook_endpoints.values()
        if row.endpoint.workspace_id == workspace_id and row.endpoint.enabled
    ]
    for values in outbox_rows(now, workspace_id, event_type, data, listening):
        position = t.next_number(POSITIONS)
        t.webhook_deliveries[position] = DeliveryRow(position=position, **values)


def publish_log(t: Tables, now: datetime, session_id: str, logged: Sequence[EventRecord]) -> None:
    """``_webhooks.publish_log``: ``publish`` for the log events that raise one."""
    raised = log_raises(logged)
    if raised:
        workspace_id = t.sessions[session_id].workspace_id
        for event_type in raised:
            publish(t, now, workspace_id, event_type, {"id": session_id})


def raising(
    event_type: str, write: Callable[..., R], stamp: str = "created_at"
) -> Callable[..., R]:
    """``_webhooks.raising`` on the tables."""
    return _webhooks.raising(event_type, write, stamp, publish)


def removing(event_type: str, remove: Callable[[Tables, str, str], None]) -> Callable[..., None]:
    """``_webhooks.removing`` on the tables."""
    return _webhooks.removing(event_type, remove, publish)


def _due(t: Tables, now: datetime) -> list[DeliveryRow]:
    """``_webhooks._due``: each enabled endpoint's oldest pending delivery, when
    its wait is over."""
    first: dict[str, DeliveryRow] = {}
    for row in t.webhook_deliveries.values():  # in position order
        if row.state == PENDING:
            first.setdefault(row.endpoint_id, row)
    return [
        row
        for row in first.values()
        if row.next_attempt_at <= now and t.webhook_endpoints[row.endpoint_id].endpoint.enabled
    ]


def any_due(t: Tables, now: datetime) -> bool:
    return bool(_due(t, now))


def claim(t: Tables, now: datetime, limit: int, lease_seconds: float) -> list[DueDelivery]:
    chosen = sorted(_due(t, now), key=lambda r: (r.next_attempt_at, r.position))[:limit]
    token = secrets.token_hex(16)
    until = now + timedelta(seconds=lease_seconds)
    claimed = []
    for row in sorted(chosen, key=lambda r: r.position):
        row = replace(row, attempts=row.attempts + 1, claim_token=token, next_attempt_at=until)
        t.webhook_deliveries[row.position] = row
        endpoint = t.webhook_endpoints[row.endpoint_id]
        claimed.append(
            DueDelivery(
                id=row.id,
                endpoint_id=row.endpoint_id,
                url=endpoint.endpoint.url,
                sealed_secret=endpoint.sealed_secret,
                payload=row.payload,
                attempt=row.attempts,
                claim_token=token,
                created_at=row.created_at,
            )
        )
    return claimed


def finish(
    t: Tables, now: datetime, delivery: DueDelivery, result: AttemptResult, retry: RetryTerms
) -> None:
    row = next((r for r in t.webhook_deliveries.values() if r.id == delivery.id), None)
    if row is None:
        return  # the endpoint was deleted while its delivery was out
    tried = WebhookAttempt(delivery.attempt, now, result.status_code, result.error)
    row = replace(row, tries=(*row.tries, tried))
    if row.claim_token == delivery.claim_token:
        values = _webhooks.outcome(now, delivery, result, retry)
        row = replace(row, claim_token=None, **values)
    t.webhook_deliveries[row.position] = row
    _purge(t, now - timedelta(seconds=retry.keep_seconds))


def _purge(t: Tables, before: datetime) -> None:
    old = [
        position
        for position, row in t.webhook_deliveries.items()
        if row.state != PENDING and row.finished_at is not None and row.finished_at < before
    ]
    for position in old[:PURGE_BATCH]:
        del t.webhook_deliveries[position]


def deliveries(
    t: Tables, workspace_id: WorkspaceScope, endpoint_id: str, limit: int
) -> list[WebhookDelivery]:
    _row(t, workspace_id, endpoint_id)
    rows = [r for r in t.webhook_deliveries.values() if r.endpoint_id == endpoint_id]
    newest = sorted(rows, key=lambda r: r.position, reverse=True)[:limit]
    return [_webhooks.delivery(row, row.tries) for row in newest]
