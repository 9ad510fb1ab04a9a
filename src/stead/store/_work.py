"""Work items and environment keys of self-hosted environments (see ``work.py``).

Every change to an item is one conditional UPDATE on its current row inside the
write transaction, so a late worker's ack, heartbeat or stop cannot overwrite a
newer claim. Secrets are stored as SHA-256 hashes only.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, and_, insert, or_, select, update

from stead.events import EventType
from stead.ids import new_id
from stead.store import _environments, _events
from stead.store._paging import fetch_page
from stead.store._workspaces import hash_secret
from stead.store.base import EventRecord, NewEvent, Page, PageRequest
from stead.store.errors import Conflict, NotFound
from stead.store.tables import environment_keys, events, work_items
from stead.store.work import (
    ENVIRONMENT_KEY_PREFIX,
    HELD_STATES,
    LIVE_STATES,
    NO_HEARTBEAT,
    TOKEN_PREFIX,
    Claimed,
    EnvironmentKey,
    HeartbeatRefused,
    QueueStats,
    WorkItem,
    WorkState,
    WorkToken,
    check_transition,
)


def _item(row: Row[Any]) -> WorkItem:
    return WorkItem(
        id=row.id,
        workspace_id=row.workspace_id,
        environment_id=row.environment_id,
        session_id=row.session_id,
        state=row.state,
        metadata=row.metadata,
        epoch=row.epoch,
        worker_id=row.worker_id,
        last_heartbeat=row.last_heartbeat,
        ttl_seconds=row.ttl_seconds,
        lease_until=row.lease_until,
        in_doubt=bool(row.in_doubt),
        created_at=row.created_at,
        polled_at=row.polled_at,
        acknowledged_at=row.acknowledged_at,
        started_at=row.started_at,
        latest_heartbeat_at=row.latest_heartbeat_at,
        stop_requested_at=row.stop_requested_at,
        stopped_at=row.stopped_at,
    )


def _key(row: Row[Any]) -> EnvironmentKey:
    return EnvironmentKey(
        row.id, row.workspace_id, row.environment_id, row.hint, row.created_at, row.revoked_at
    )


def _self_hosted(conn: Connection, workspace_id: str, environment_id: str) -> bool:
    env = _environments.get(conn, workspace_id, environment_id)
    return bool(env.config.get("type") == "self_hosted")


def create_environment_key(
    conn: Connection, now: datetime, workspace_id: str, environment_id: str
) -> tuple[EnvironmentKey, str]:
    if not _self_hosted(conn, workspace_id, environment_id):
        raise Conflict(
            f"environment {environment_id} is not self_hosted; only those take workers", status=400
        )
    secret = ENVIRONMENT_KEY_PREFIX + secrets.token_urlsafe(32)
    key = EnvironmentKey(
        new_id("environment_key"), workspace_id, environment_id, secret[-4:], now, None
    )
    conn.execute(
        insert(environment_keys).values(
            id=key.id,
            workspace_id=workspace_id,
            environment_id=environment_id,
            key_hash=hash_secret(secret),
            hint=key.hint,
            created_at=now,
        )
    )
    return key, secret


def revoke_environment_key(
    conn: Connection, now: datetime, workspace_id: str, environment_id: str, key_id: str
) -> EnvironmentKey:
    where = and_(
        environment_keys.c.id == key_id,
        environment_keys.c.workspace_id == workspace_id,
        environment_keys.c.environment_id == environment_id,
    )
    conn.execute(
        update(environment_keys)
        .where(where, environment_keys.c.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    row = conn.execute(select(environment_keys).where(where)).first()
    if row is None:
        raise NotFound("environment key", key_id)
    return _key(row)


def authenticate_environment_key(conn: Connection, secret: str) -> EnvironmentKey | None:
    row = conn.execute(
        select(environment_keys).where(
            environment_keys.c.key_hash == hash_secret(secret),
            environment_keys.c.revoked_at.is_(None),
        )
    ).first()
    return None if row is None else _key(row)


def authenticate_work_token(conn: Connection, secret: str) -> WorkToken | None:
    row = conn.execute(
        select(work_items).where(
            work_items.c.token_hash == hash_secret(secret),
            work_items.c.state != WorkState.STOPPED,
        )
    ).first()
    if row is None:
        return None
    return WorkToken(row.workspace_id, row.environment_id, row.id, row.session_id, row.epoch)


def _get(conn: Connection, workspace_id: str, environment_id: str, work_id: str) -> WorkItem:
    row = conn.execute(
        select(work_items).where(
            work_items.c.id == work_id,
            work_items.c.workspace_id == workspace_id,
            work_items.c.environment_id == environment_id,
        )
    ).first()
    if row is None:
        raise NotFound("work", work_id)
    return _item(row)


def get_work(conn: Connection, workspace_id: str, environment_id: str, work_id: str) -> WorkItem:
    return _get(conn, workspace_id, environment_id, work_id)


def ensure_work_item(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    session_id: str,
    ttl_seconds: float,
) -> WorkItem | None:
    if not _self_hosted(conn, workspace_id, environment_id):
        return None
    row = conn.execute(
        select(work_items).where(
            work_items.c.session_id == session_id, work_items.c.state.in_(LIVE_STATES)
        )
    ).first()
    if row is not None:
        return _item(row)
    work_id = new_id("work")
    conn.execute(
        insert(work_items).values(
            id=work_id,
            workspace_id=workspace_id,
            environment_id=environment_id,
            session_id=session_id,
            state=WorkState.QUEUED,
            metadata={},
            epoch=0,
            ttl_seconds=ttl_seconds,
            in_doubt=0,
            created_at=now,
        )
    )
    return _get(conn, workspace_id, environment_id, work_id)


def _change(conn: Connection, item: WorkItem, new: WorkState | None, **values: Any) -> WorkItem:
    """Fenced: applies only if the row is still at the item's epoch and state."""
    if new is not None:
        check_transition(item.state, new)
        values["state"] = new
    done = conn.execute(
        update(work_items)
        .where(
            work_items.c.id == item.id,
            work_items.c.epoch == item.epoch,
            work_items.c.state == item.state,
        )
        .values(**values)
    )
    if done.rowcount != 1:
        raise Conflict(f"work {item.id} changed meanwhile; try again")
    return _get(conn, item.workspace_id, item.environment_id, item.id)


def poll_work(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    worker_id: str | None,
    reclaim_after: float,
) -> Claimed | None:
    _environments.get(conn, workspace_id, environment_id)
    unclaimed = and_(
        work_items.c.state == WorkState.QUEUED,
        or_(
            work_items.c.polled_at.is_(None),
            work_items.c.polled_at < now - timedelta(seconds=reclaim_after),
        ),
    )
    lapsed = and_(work_items.c.state.in_(HELD_STATES), work_items.c.lease_until < now)
    row = conn.execute(
        select(work_items)
        .where(
            work_items.c.workspace_id == workspace_id,
            work_items.c.environment_id == environment_id,
            or_(unclaimed, lapsed),
        )
        .order_by(work_items.c.created_at, work_items.c.id)
        .limit(1)
    ).first()
    if row is None:
        return None
    item = _item(row)
    token = f"{TOKEN_PREFIX}{item.id}.{secrets.token_urlsafe(32)}"
    held = item.state != WorkState.QUEUED
    claimed = _change(
        conn,
        item,
        WorkState.QUEUED if held else None,
        epoch=item.epoch + 1,
        worker_id=worker_id,
        token_hash=hash_secret(token),
        last_heartbeat=None,
        lease_until=None,
        polled_at=now,
        acknowledged_at=None,
        # A worker that held the item may have started its tool calls.
        in_doubt=1 if held or item.in_doubt else 0,
    )
    return Claimed(claimed, token)


def ack_work(
    conn: Connection, now: datetime, workspace_id: str, environment_id: str, work_id: str
) -> WorkItem:
    item = _get(conn, workspace_id, environment_id, work_id)
    if item.state in HELD_STATES and item.state != WorkState.STOPPING:
        return item
    if item.state != WorkState.QUEUED or item.polled_at is None:
        raise Conflict(
            f"work {work_id} is {item.state}{'' if item.polled_at else ', unclaimed'}; "
            "only a polled, queued item can be acknowledged"
        )
    return _change(
        conn,
        item,
        WorkState.STARTING,
        acknowledged_at=now,
        lease_until=now + timedelta(seconds=item.ttl_seconds),
    )


def heartbeat_work(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    work_id: str,
    expected: str | None,
    ttl_seconds: float,
    epoch: int | None,
) -> tuple[WorkItem, bool]:
    item = _get(conn, workspace_id, environment_id, work_id)
    if epoch is not None and epoch != item.epoch:
        raise HeartbeatRefused(
            item, f"work {work_id} was claimed again since this token was issued"
        )
    if item.state == WorkState.STOPPED:
        return item, False
    if item.state == WorkState.QUEUED and item.polled_at is None:
        raise HeartbeatRefused(item, f"work {work_id} is queued and unclaimed")
    wanted = NO_HEARTBEAT if item.last_heartbeat is None else item.last_heartbeat
    if expected is not None and expected != wanted:
        raise HeartbeatRefused(
            item,
            f"expected_last_heartbeat {expected[:64]!r} is not the last heartbeat of {work_id}",
        )
    beat = now.isoformat()
    new = WorkState.ACTIVE if item.state in (WorkState.QUEUED, WorkState.STARTING) else None
    if item.state == WorkState.QUEUED:
        _change(conn, item, WorkState.STARTING, acknowledged_at=now)
        item = _get(conn, workspace_id, environment_id, work_id)
    changed = _change(
        conn,
        item,
        new,
        last_heartbeat=beat,
        ttl_seconds=ttl_seconds,
        lease_until=now + timedelta(seconds=ttl_seconds),
        latest_heartbeat_at=now,
        started_at=item.started_at or now,
    )
    return changed, True


def stop_work(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    work_id: str,
    force: bool,
) -> WorkItem:
    item = _get(conn, workspace_id, environment_id, work_id)
    if item.state == WorkState.STOPPED:
        raise Conflict(f"work {work_id} is already stopped")
    if force or item.state == WorkState.QUEUED:
        return _change(
            conn,
            item,
            WorkState.STOPPED,
            stopped_at=now,
            stop_requested_at=item.stop_requested_at or now,
            token_hash=None,
            lease_until=None,
        )
    if item.state == WorkState.STOPPING:
        return item
    return _change(conn, item, WorkState.STOPPING, stop_requested_at=now)


def settled_work(conn: Connection, _now: datetime, work_id: str, epoch: int) -> None:
    conn.execute(
        update(work_items)
        .where(work_items.c.id == work_id, work_items.c.epoch == epoch)
        .values(in_doubt=0)
    )


def update_work_metadata(
    conn: Connection,
    _now: datetime,
    workspace_id: str,
    environment_id: str,
    work_id: str,
    patch: dict[str, Any],
) -> WorkItem:
    item = _get(conn, workspace_id, environment_id, work_id)
    merged = dict(item.metadata)
    for name, value in patch.items():
        if value is None or value == "":
            merged.pop(name, None)
        else:
            merged[name] = value
    conn.execute(update(work_items).where(work_items.c.id == work_id).values(metadata=merged))
    return _get(conn, workspace_id, environment_id, work_id)


def list_work(
    conn: Connection, workspace_id: str, environment_id: str, page: PageRequest
) -> Page[WorkItem]:
    _environments.get(conn, workspace_id, environment_id)
    stmt = select(work_items).where(
        work_items.c.workspace_id == workspace_id,
        work_items.c.environment_id == environment_id,
    )
    return fetch_page(conn, stmt, [work_items.c.created_at, work_items.c.id], page, _item)


def work_stats(conn: Connection, workspace_id: str, environment_id: str) -> QueueStats:
    """``depth``: queued, never handed out; ``pending``: handed out, not acked."""
    _environments.get(conn, workspace_id, environment_id)
    rows = conn.execute(
        select(work_items.c.polled_at, work_items.c.created_at).where(
            work_items.c.workspace_id == workspace_id,
            work_items.c.environment_id == environment_id,
            work_items.c.state == WorkState.QUEUED,
        )
    ).all()
    depth = sum(1 for r in rows if r.polled_at is None)
    oldest = min((r.created_at for r in rows), default=None)
    return QueueStats(depth=depth, pending=len(rows) - depth, oldest_queued_at=oldest)


ANSWER_TYPES = (EventType.USER_TOOL_RESULT, EventType.AGENT_TOOL_RESULT)


def first_answers(
    new: Sequence[NewEvent], logged_answer: Callable[[str], EventRecord | None]
) -> tuple[list[NewEvent], list[EventRecord]]:
    """``new`` without the ``user.tool_result`` events whose tool use already has
    a result (a worker that reported twice, or after stead settled the call),
    and the logged results they repeat: a result is recorded once.
    ``logged_answer(tool_use_id)`` is the result the log holds, if any."""
    kept: list[NewEvent] = []
    repeated: list[EventRecord] = []
    seen: set[str] = set()
    for event in new:
        use_id = event.body.get("tool_use_id") if event.type == EventType.USER_TOOL_RESULT else None
        if not isinstance(use_id, str):
            kept.append(event)
            continue
        if use_id in seen:
            continue
        seen.add(use_id)
        earlier = logged_answer(use_id)
        if earlier is None:
            kept.append(event)
        else:
            repeated.append(earlier)
    return kept, repeated


def logged_answer(conn: Connection, session_id: str, use_id: str) -> EventRecord | None:
    use = _events.find(conn, session_id, use_id)
    if use is None or use.seq is None:
        return None
    rows = conn.execute(
        select(events.c.id, events.c.body)
        .where(
            events.c.session_id == session_id,
            events.c.seq > use.seq,
            events.c.type.in_(ANSWER_TYPES),
        )
        .order_by(events.c.seq)
    ).all()
    for row in rows:
        if row.body.get("tool_use_id") == use_id:
            return _events.find(conn, session_id, row.id)
    return None
