"""Queries of the webhook tables (``webhooks.py`` says what they hold).

``publish`` and ``publish_log`` run inside the transaction that made their
event: the outbox row commits with the event or not at all.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Row, and_, bindparam, delete, func, insert, select, update

from stead.ids import new_id
from stead.schemas import webhooks
from stead.store import _kept_key, _locks
from stead.store._compiled import compiled
from stead.store.base import EventRecord
from stead.store.errors import Conflict, NotFound
from stead.store.tables import (
    sessions,
    webhook_attempts,
    webhook_deliveries,
    webhook_endpoints,
    workspaces,
)
from stead.store.webhooks import (
    AttemptResult,
    DeliveryState,
    DueDelivery,
    RetryTerms,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WorkspaceScope,
)

ends = webhook_endpoints.c
outbox = webhook_deliveries.c
tries = webhook_attempts.c
PENDING, DELIVERED, FAILED = DeliveryState.PENDING, DeliveryState.DELIVERED, DeliveryState.FAILED
PURGE_BATCH = 100
MAX_ENDPOINTS = 16
"""Endpoints per workspace: each event is written once per subscribed endpoint."""
MAX_DOUBLINGS = 1000
"""A failed delivery's wait doubles at most this often: the float 2.0**1024
overflows, and 2**1000 times any base is far past any maximum wait."""
R = TypeVar("R")


def _endpoint(row: Row[Any]) -> WebhookEndpoint:
    return WebhookEndpoint(
        id=row.id,
        workspace_id=row.workspace_id,
        url=row.url,
        description=row.description,
        event_types=tuple(row.event_types),
        enabled=bool(row.enabled),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _scoped(workspace_id: WorkspaceScope, endpoint_id: str) -> Any:
    this = ends.id == endpoint_id
    return this if workspace_id is None else and_(this, ends.workspace_id == workspace_id)


def create(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    endpoint_id: str,
    fields: Mapping[str, object],
    sealed_secret: bytes,
) -> WebhookEndpoint:
    _locks.row(conn, workspaces, workspace_id)  # concurrent creates count one by one
    if conn.execute(select(workspaces.c.id).where(workspaces.c.id == workspace_id)).first() is None:
        raise NotFound("workspace", workspace_id)  # the admin CLI names one
    held = select(func.count()).select_from(webhook_endpoints)
    check_room(conn.execute(held.where(ends.workspace_id == workspace_id)).scalar_one())
    _kept_key.check(conn, sealed_secret)
    row = {
        "id": endpoint_id,
        "workspace_id": workspace_id,
        "url": fields["url"],
        "description": fields.get("description"),
        "event_types": list(fields["event_types"]),  # type: ignore[call-overload]
        "enabled": True,
        "sealed_secret": sealed_secret,
        "created_at": now,
        "updated_at": now,
    }
    conn.execute(insert(webhook_endpoints).values(**row))
    return get(conn, workspace_id, endpoint_id)


def check_room(held: int) -> None:
    """Refuses a new endpoint to a workspace that holds ``held`` already."""
    if held >= MAX_ENDPOINTS:
        raise Conflict(
            f"the workspace has {MAX_ENDPOINTS} webhook endpoints, the most it may; "
            "delete one first",
            status=400,
        )


def get(conn: Connection, workspace_id: WorkspaceScope, endpoint_id: str) -> WebhookEndpoint:
    row = conn.execute(
        select(webhook_endpoints).where(_scoped(workspace_id, endpoint_id))
    ).one_or_none()
    if row is None:
        raise NotFound("webhook endpoint", endpoint_id)
    return _endpoint(row)


def list_(conn: Connection, workspace_id: WorkspaceScope) -> list[WebhookEndpoint]:
    stmt = select(webhook_endpoints).order_by(ends.created_at, ends.id)
    if workspace_id is not None:
        stmt = stmt.where(ends.workspace_id == workspace_id)
    return [_endpoint(row) for row in conn.execute(stmt)]


def update_(
    conn: Connection,
    now: datetime,
    workspace_id: WorkspaceScope,
    endpoint_id: str,
    change: Mapping[str, object],
    sealed_secret: bytes | None,
) -> WebhookEndpoint:
    values: dict[str, object] = {**change, "updated_at": now}
    if sealed_secret is not None:
        _kept_key.check(conn, sealed_secret)
        values["sealed_secret"] = sealed_secret
    stmt = update(webhook_endpoints).where(_scoped(workspace_id, endpoint_id)).values(**values)
    if conn.execute(stmt).rowcount != 1:
        raise NotFound("webhook endpoint", endpoint_id)
    return get(conn, workspace_id, endpoint_id)


def delete_(conn: Connection, workspace_id: WorkspaceScope, endpoint_id: str) -> None:
    get(conn, workspace_id, endpoint_id)
    conn.execute(delete(webhook_attempts).where(tries.endpoint_id == endpoint_id))
    conn.execute(delete(webhook_deliveries).where(outbox.endpoint_id == endpoint_id))
    conn.execute(delete(webhook_endpoints).where(ends.id == endpoint_id))


def reseal(conn: Connection, now: datetime, resealed: Callable[[str, bytes], bytes | None]) -> int:
    changed = 0
    kept = _kept_key.kept(conn)
    for row in conn.execute(select(ends.id, ends.sealed_secret)).all():
        sealed = resealed(row.id, bytes(row.sealed_secret))
        if sealed is not None:
            _kept_key.refuse_others(kept, [sealed])
            conn.execute(
                update(webhook_endpoints).where(ends.id == row.id).values(sealed_secret=sealed)
            )
            changed += 1
    return changed


def publish(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    event_type: str,
    data: Mapping[str, object],
) -> None:
    """Outbox rows of one event for each enabled endpoint of the workspace subscribed
    to ``event_type``; ``data``: the event's fields beside ``type`` and the ids."""
    # Compiled once per connection: every create, update and archive pays this read.
    statement = compiled(conn, "webhooks.workspace_endpoints", _workspace_endpoints_statement)
    found = statement.fetch(conn, {"workspace_id": workspace_id})
    if found:
        _enqueue(conn, now, workspace_id, event_type, data, found)


def _workspace_endpoints_statement() -> Any:
    return select(ends.id, ends.event_types).where(
        ends.workspace_id == bindparam("workspace_id"), ends.enabled.is_(True)
    )


def _enqueue(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    event_type: str,
    data: Mapping[str, object],
    endpoints: Sequence[Any],
) -> None:
    rows = outbox_rows(now, workspace_id, event_type, data, endpoints)
    if rows:
        conn.execute(insert(webhook_deliveries), rows)


def outbox_rows(
    now: datetime,
    workspace_id: str,
    event_type: str,
    data: Mapping[str, object],
    endpoints: Sequence[Any],
) -> list[dict[str, Any]]:
    """The outbox rows (``webhook_deliveries`` columns but ``position``) of one
    event for each of ``endpoints`` (with ``id`` and ``event_types``) subscribed to it."""
    targets = [row.id for row in endpoints if event_type in row.event_types]
    if not targets:
        return []
    event_id = new_id("webhook_event")
    payload = json.dumps(
        {
            "type": "event",
            "id": event_id,
            "created_at": now.isoformat().replace("+00:00", "Z"),
            "data": {
                **data,
                "type": event_type,
                "workspace_id": workspace_id,
                # stead has no organizations above its workspaces.
                "organization_id": workspace_id,
            },
        },
        separators=(",", ":"),
    )
    return [
        {
            "id": new_id("webhook_delivery"),
            "endpoint_id": endpoint_id,
            "event_id": event_id,
            "event_type": event_type,
            "payload": payload,
            "state": PENDING,
            "attempts": 0,
            "next_attempt_at": now,
            "claim_token": None,
            "created_at": now,
            "finished_at": None,
        }
        for endpoint_id in targets
    ]


def _session_endpoints_statement() -> Any:
    return (
        select(ends.id, ends.event_types, ends.workspace_id)
        .select_from(sessions.join(webhook_endpoints, ends.workspace_id == sessions.c.workspace_id))
        .where(sessions.c.id == bindparam("session_id"), ends.enabled.is_(True))
    )


def publish_log(
    conn: Connection, now: datetime, session_id: str, logged: Sequence[EventRecord]
) -> None:
    """``publish`` for the log events that raise a webhook event (``FROM_LOG``):
    nothing for a batch with none, one compiled read when no endpoint listens."""
    raised = log_raises(logged)
    if not raised:
        return
    statement = compiled(conn, "webhooks.session_endpoints", _session_endpoints_statement)
    found = statement.fetch(conn, {"session_id": session_id})
    if not found:
        return
    for event_type in raised:
        _enqueue(conn, now, found[0].workspace_id, event_type, {"id": session_id}, found)


def log_raises(logged: Sequence[EventRecord]) -> list[str]:
    """The webhook event types the log events ``logged`` raise, in order."""
    return [
        t for e in logged if e.type in webhooks.FROM_LOG for t in webhooks.raised_by(e.type, e.body)
    ]


Publish = Callable[[Any, datetime, str, str, Mapping[str, object]], None]
"""``publish`` on a connection, or the in-memory store's on its tables."""


def raising(
    event_type: str,
    write: Callable[..., R],
    stamp: str = "created_at",
    publish: Publish = publish,
) -> Callable[..., R]:
    """``write`` (a query taking ``conn, now, workspace_id, ...`` that returns a record,
    or a tuple that starts with one), then ``event_type`` published for that record
    in the same transaction, when the record's ``stamp`` is this transaction's time:
    a write that changed nothing raises nothing."""

    def raised(conn: Any, now: datetime, workspace_id: str, *args: Any) -> R:
        result = write(conn, now, workspace_id, *args)
        record: Any = result[0] if isinstance(result, tuple) else result
        if getattr(record, stamp) == now:
            publish(conn, now, workspace_id, event_type, {"id": record.id})
        return result

    return raised


def removing(
    event_type: str, remove: Callable[[Any, str, str], None], publish: Publish = publish
) -> Callable[..., None]:
    """``remove`` (a delete taking ``conn, workspace_id, id``), then ``event_type``
    published for the id in the same transaction."""

    def removed(conn: Any, now: datetime, workspace_id: str, ident: str) -> None:
        remove(conn, workspace_id, ident)
        publish(conn, now, workspace_id, event_type, {"id": ident})

    return removed


def _due(now: datetime) -> Any:
    """Deliveries that may go now: pending, past their wait, the oldest pending
    one of an enabled endpoint (an endpoint's deliveries go one at a time, in order)."""
    earlier = webhook_deliveries.alias("earlier")
    first_pending = ~(
        select(earlier.c.position)
        .where(
            earlier.c.endpoint_id == outbox.endpoint_id,
            earlier.c.state == PENDING,
            earlier.c.position < outbox.position,
        )
        .exists()
    )
    return (
        select(outbox.position)
        .join(webhook_endpoints, ends.id == outbox.endpoint_id)
        .where(
            outbox.state == PENDING,
            outbox.next_attempt_at <= now,
            ends.enabled.is_(True),
            first_pending,
        )
    )


def any_due(conn: Connection, now: datetime) -> bool:
    return conn.execute(_due(now).limit(1)).first() is not None


def claim(conn: Connection, now: datetime, limit: int, lease_seconds: float) -> list[DueDelivery]:
    due = (
        _due(now)
        .order_by(outbox.next_attempt_at, outbox.position)
        .limit(limit)
        .with_for_update(of=webhook_deliveries, skip_locked=True)
    )
    positions = list(conn.execute(due).scalars())
    if not positions:
        return []
    token = secrets.token_hex(16)
    conn.execute(
        update(webhook_deliveries)
        .where(outbox.position.in_(positions))
        .values(
            attempts=outbox.attempts + 1,
            claim_token=token,
            next_attempt_at=now + timedelta(seconds=lease_seconds),
        )
    )
    rows = conn.execute(
        select(webhook_deliveries, ends.url, ends.sealed_secret)
        .join(webhook_endpoints, ends.id == outbox.endpoint_id)
        .where(outbox.position.in_(positions))
        .order_by(outbox.position)
    )
    return [
        DueDelivery(
            id=row.id,
            endpoint_id=row.endpoint_id,
            url=row.url,
            sealed_secret=bytes(row.sealed_secret),
            payload=row.payload,
            attempt=row.attempts,
            claim_token=token,
            created_at=row.created_at,
        )
        for row in rows
    ]


def finish(
    conn: Connection, now: datetime, delivery: DueDelivery, result: AttemptResult, retry: RetryTerms
) -> None:
    attempt = {
        "delivery_id": delivery.id,
        "attempt": delivery.attempt,
        "endpoint_id": delivery.endpoint_id,
        "at": now,
        "status_code": result.status_code,
        "error": result.error,
    }
    exists = select(outbox.id).where(outbox.id == delivery.id)
    if conn.execute(exists).first() is None:
        return  # the endpoint was deleted while its delivery was out
    conn.execute(insert(webhook_attempts).values(**attempt))
    ours = and_(outbox.id == delivery.id, outbox.claim_token == delivery.claim_token)
    values = outcome(now, delivery, result, retry)
    conn.execute(update(webhook_deliveries).where(ours).values(claim_token=None, **values))
    _purge(conn, now - timedelta(seconds=retry.keep_seconds))


def outcome(
    now: datetime, delivery: DueDelivery, result: AttemptResult, retry: RetryTerms
) -> dict[str, Any]:
    """What an attempt's ``result`` changes in the delivery it claimed: delivered,
    failed past ``give_up_seconds``, or due again after the backoff."""
    if result.delivered:
        return {"state": DELIVERED, "finished_at": now}
    if now - delivery.created_at >= timedelta(seconds=retry.give_up_seconds):
        return {"state": FAILED, "finished_at": now}
    # Bounded: the 1,025th attempt (hours away when the waits are short) made
    # the power overflow, and its record failed with it, every time.
    doublings = min(delivery.attempt - 1, MAX_DOUBLINGS)
    wait = min(retry.base_seconds * 2.0**doublings, retry.max_seconds)
    return {"next_attempt_at": now + timedelta(seconds=wait)}


def _purge(conn: Connection, before: datetime) -> None:
    old = list(
        conn.execute(
            select(outbox.id)
            .where(outbox.state != PENDING, outbox.finished_at < before)
            .limit(PURGE_BATCH)
            .with_for_update(skip_locked=True)
        ).scalars()
    )
    if old:
        conn.execute(delete(webhook_attempts).where(tries.delivery_id.in_(old)))
        conn.execute(delete(webhook_deliveries).where(outbox.id.in_(old)))


def deliveries(
    conn: Connection, workspace_id: WorkspaceScope, endpoint_id: str, limit: int
) -> list[WebhookDelivery]:
    get(conn, workspace_id, endpoint_id)
    rows = conn.execute(
        select(webhook_deliveries)
        .where(outbox.endpoint_id == endpoint_id)
        .order_by(outbox.position.desc())
        .limit(limit)
    ).all()
    ids = [row.id for row in rows]
    made: dict[str, list[WebhookAttempt]] = {i: [] for i in ids}
    for t in conn.execute(
        select(webhook_attempts)
        .where(tries.delivery_id.in_(ids))
        .order_by(tries.delivery_id, tries.attempt)
    ):
        made[t.delivery_id].append(WebhookAttempt(t.attempt, t.at, t.status_code, t.error))
    return [delivery(row, made[row.id]) for row in rows]


def delivery(row: Any, tries: Sequence[WebhookAttempt]) -> WebhookDelivery:
    """The delivery of a ``webhook_deliveries`` row (or the in-memory store's)."""
    return WebhookDelivery(
        id=row.id,
        endpoint_id=row.endpoint_id,
        event_id=row.event_id,
        event_type=row.event_type,
        state=DeliveryState(row.state),
        attempts=row.attempts,
        next_attempt_at=row.next_attempt_at,
        created_at=row.created_at,
        finished_at=row.finished_at,
        tries=tuple(sorted(tries, key=lambda t: t.attempt)),
    )
