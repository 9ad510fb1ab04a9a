"""Work items and environment keys of self-hosted environments (see ``work.py``).

Every change to an item is one conditional UPDATE on its current row inside the
write transaction, so a late worker's ack, heartbeat or stop cannot overwrite a
newer claim. Secrets are stored as SHA-256 hashes only.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Row, and_, delete, func, insert, or_, select, update

from stead.ids import new_id
from stead.store import _environments, _locks
from stead.store._paging import fetch_page
from stead.store._workspaces import hash_secret
from stead.store.base import EnvironmentRecord, Page, PageRequest
from stead.store.errors import Conflict, NotFound
from stead.store.tables import environment_keys, work_items
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
        key_id=row.key_id,
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


def is_self_hosted(env: EnvironmentRecord) -> bool:
    return bool(env.config.get("type") == "self_hosted")


def new_environment_key(now: datetime, env: EnvironmentRecord) -> tuple[EnvironmentKey, str]:
    """A key for ``env`` and its secret (the store keeps only its hash)."""
    if not is_self_hosted(env):
        raise Conflict(
            f"environment {env.id} is not self_hosted; only those take workers", status=400
        )
    secret = ENVIRONMENT_KEY_PREFIX + secrets.token_urlsafe(32)
    ident = new_id("environment_key")
    return EnvironmentKey(ident, env.workspace_id, env.id, secret[-4:], now, None), secret


def create_environment_key(
    conn: Connection, now: datetime, workspace_id: str, environment_id: str
) -> tuple[EnvironmentKey, str]:
    key, secret = new_environment_key(now, _environments.get(conn, workspace_id, environment_id))
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
    claims = (
        select(work_items)
        .where(work_items.c.key_id == key_id, work_items.c.state != WorkState.STOPPED)
        .with_for_update()
    )
    for claimed in conn.execute(claims).all():
        item = _item(claimed)
        _change(conn, item, key_revoked(item, now))
    return _key(row)


def key_revoked(item: WorkItem, now: datetime) -> Step:
    """The step that ends ``item``'s claim when the key it was polled with is
    revoked: its sessions token goes, and a held item's lease lapses now, so
    the next poll takes it (its calls in doubt) instead of after the lease."""
    values: dict[str, Any] = {"token_hash": None}
    if item.state in HELD_STATES:
        values["lease_until"] = now
    return None, values


def authenticate_environment_key(conn: Connection, secret: str) -> EnvironmentKey | None:
    row = conn.execute(
        select(environment_keys).where(
            environment_keys.c.key_hash == hash_secret(secret),
            environment_keys.c.revoked_at.is_(None),
        )
    ).first()
    return None if row is None else _key(row)


def authenticate_work_token(conn: Connection, secret: str) -> WorkToken | None:
    # A claim polled while its key was being revoked (the poll authenticated
    # first) is refused here: its key is revoked, though the revoke missed it.
    revoked = (
        select(environment_keys.c.id)
        .where(environment_keys.c.id == work_items.c.key_id)
        .where(environment_keys.c.revoked_at.is_not(None))
        .exists()
    )
    row = conn.execute(
        select(work_items).where(
            work_items.c.token_hash == hash_secret(secret),
            work_items.c.state != WorkState.STOPPED,
            ~revoked,
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


def new_item(
    now: datetime, workspace_id: str, environment_id: str, session_id: str, ttl_seconds: float
) -> WorkItem:
    """A session's new item: queued, never claimed."""
    return WorkItem(
        id=new_id("work"),
        workspace_id=workspace_id,
        environment_id=environment_id,
        session_id=session_id,
        state=WorkState.QUEUED,
        metadata={},
        epoch=0,
        worker_id=None,
        key_id=None,
        last_heartbeat=None,
        ttl_seconds=ttl_seconds,
        lease_until=None,
        in_doubt=False,
        created_at=now,
        polled_at=None,
        acknowledged_at=None,
        started_at=None,
        latest_heartbeat_at=None,
        stop_requested_at=None,
        stopped_at=None,
    )


def ensure_work_item(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    session_id: str,
    ttl_seconds: float,
) -> WorkItem | None:
    if not is_self_hosted(_environments.get(conn, workspace_id, environment_id)):
        return None
    # Two processes queueing the session's work at once (a turn's call, a stop
    # that left calls waiting) must not both find none and queue one each:
    # two workers would run the session's calls.
    _locks.session(conn, session_id)
    row = conn.execute(
        select(work_items).where(
            work_items.c.session_id == session_id, work_items.c.state.in_(LIVE_STATES)
        )
    ).first()
    if row is not None:
        return _item(row)
    latest = latest_work(conn, session_id)
    if unsettled_stop(latest):
        return latest  # its calls are answered first (``WorkQueue.ensure``)
    item = new_item(now, workspace_id, environment_id, session_id, ttl_seconds)
    conn.execute(insert(work_items).values(**_columns(asdict(item))))
    return _get(conn, workspace_id, environment_id, item.id)


def unsettled_stop(item: WorkItem | None) -> bool:
    """``item`` stopped while a worker held it, and the calls that worker may
    have started are not answered yet: no new item may be queued before they are
    (its worker would run them again)."""
    return item is not None and item.state == WorkState.STOPPED and item.in_doubt


def _columns(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` of a ``WorkItem`` as ``work_items`` holds them."""
    if "in_doubt" in values:
        return {**values, "in_doubt": int(values["in_doubt"])}
    return values


Step = tuple[WorkState | None, dict[str, Any]]
"""A change to an item: its new state (None: the same) and the columns it sets."""


def _change(conn: Connection, item: WorkItem, step: Step) -> WorkItem:
    """Fenced: applies only if the row is still at the item's epoch and state."""
    new, values = step
    if new is not None:
        check_transition(item.state, new)
        values = {**values, "state": new}
    done = conn.execute(
        update(work_items)
        .where(
            work_items.c.id == item.id,
            work_items.c.epoch == item.epoch,
            work_items.c.state == item.state,
        )
        .values(**_columns(values))
    )
    if done.rowcount != 1:
        raise Conflict(f"work {item.id} changed meanwhile; try again")
    return _get(conn, item.workspace_id, item.environment_id, item.id)


def claimable(item: WorkItem, now: datetime, reclaim_after: float) -> bool:
    """A poll may take ``item``: queued and not polled in the last ``reclaim_after``
    seconds, or held by a worker whose lease lapsed (``poll_work``'s condition)."""
    if item.state == WorkState.QUEUED:
        return item.polled_at is None or item.polled_at < now - timedelta(seconds=reclaim_after)
    return item.state in HELD_STATES and item.lease_until is not None and item.lease_until < now


def poll_work(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    worker_id: str | None,
    reclaim_after: float,
    key_id: str | None = None,
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
        # PostgreSQL: an item another poll is claiming is passed over for the
        # next, where this poll waited for that claim and was refused (409).
        # SQLite's single writer renders and needs nothing.
        .with_for_update(skip_locked=True)
    ).first()
    if row is None:
        return None
    item = _item(row)
    step, token = claim(item, now, worker_id, key_id)
    return Claimed(_change(conn, item, step), token)


def claim(
    item: WorkItem, now: datetime, worker_id: str | None, key_id: str | None = None
) -> tuple[Step, str]:
    """A poll's claim of ``item`` (a new epoch and sessions token, which revokes
    the last claim's), and the token; ``token_hash`` is among the step's columns.
    ``key_id``: the environment key the poll came with."""
    token = f"{TOKEN_PREFIX}{item.id}.{secrets.token_urlsafe(32)}"
    held = item.state != WorkState.QUEUED
    values = {
        "epoch": item.epoch + 1,
        "worker_id": worker_id,
        "key_id": key_id,
        "token_hash": hash_secret(token),
        "last_heartbeat": None,
        "lease_until": None,
        "polled_at": now,
        "acknowledged_at": None,
        # A worker that held the item may have started its tool calls.
        "in_doubt": held or item.in_doubt,
    }
    return (WorkState.QUEUED if held else None, values), token


def ack_work(
    conn: Connection, now: datetime, workspace_id: str, environment_id: str, work_id: str
) -> WorkItem:
    item = _get(conn, workspace_id, environment_id, work_id)
    step = ack(item, now)
    return item if step is None else _change(conn, item, step)


def ack(item: WorkItem, now: datetime) -> Step | None:
    """The step that acknowledges ``item``; None when it is held already."""
    if item.state in HELD_STATES and item.state != WorkState.STOPPING:
        return None
    if item.state != WorkState.QUEUED or item.polled_at is None:
        raise Conflict(
            f"work {item.id} is {item.state}{'' if item.polled_at else ', unclaimed'}; "
            "only a polled, queued item can be acknowledged"
        )
    lease_until = now + timedelta(seconds=item.ttl_seconds)
    return WorkState.STARTING, {"acknowledged_at": now, "lease_until": lease_until}


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
    steps = heartbeat(item, now, expected, ttl_seconds, epoch)
    for step in steps:
        item = _change(conn, item, step)
    return item, bool(steps)


def heartbeat(
    item: WorkItem, now: datetime, expected: str | None, ttl_seconds: float, epoch: int | None
) -> list[Step]:
    """The steps of a heartbeat on ``item`` (none for a stopped one: its lease is
    not extended). Raises ``HeartbeatRefused``."""
    if epoch is not None and epoch != item.epoch:
        raise HeartbeatRefused(
            item, f"work {item.id} was claimed again since this token was issued"
        )
    if item.state == WorkState.STOPPED:
        return []
    if item.state == WorkState.QUEUED and item.polled_at is None:
        raise HeartbeatRefused(item, f"work {item.id} is queued and unclaimed")
    wanted = NO_HEARTBEAT if item.last_heartbeat is None else item.last_heartbeat
    if expected is not None and expected != wanted:
        raise HeartbeatRefused(
            item,
            f"expected_last_heartbeat {expected[:64]!r} is not the last heartbeat of {item.id}",
        )
    beat: dict[str, Any] = {
        "last_heartbeat": now.isoformat(),
        "ttl_seconds": ttl_seconds,
        "lease_until": now + timedelta(seconds=ttl_seconds),
        "latest_heartbeat_at": now,
        "started_at": item.started_at or now,
    }
    if item.state == WorkState.QUEUED:  # the first heartbeat acknowledges it too
        return [(WorkState.STARTING, {"acknowledged_at": now}), (WorkState.ACTIVE, beat)]
    return [(WorkState.ACTIVE if item.state == WorkState.STARTING else None, beat)]


def stop_work(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    work_id: str,
    force: bool,
) -> WorkItem:
    item = _get(conn, workspace_id, environment_id, work_id)
    step = stop(item, now, force)
    return item if step is None else _change(conn, item, step)


def stop(item: WorkItem, now: datetime, force: bool) -> Step | None:
    """The step that stops ``item`` (or asks its worker to); None when it is stopping."""
    if item.state == WorkState.STOPPED:
        raise Conflict(f"work {item.id} is already stopped")
    if force or item.state == WorkState.QUEUED:
        return WorkState.STOPPED, {
            "stopped_at": now,
            "stop_requested_at": item.stop_requested_at or now,
            "token_hash": None,
            "lease_until": None,
            # A worker that held it may have started its calls: they are
            # answered (``WorkQueue.stopped``) before the session's next item.
            "in_doubt": item.in_doubt or item.acknowledged_at is not None,
        }
    if item.state == WorkState.STOPPING:
        return None
    return WorkState.STOPPING, {"stop_requested_at": now}


def session_archived(conn: Connection, now: datetime, session_id: str) -> None:
    """The session's items stop: no worker is handed an archived session, and
    a worker that holds one loses its sessions token."""
    conn.execute(
        update(work_items)
        .where(work_items.c.session_id == session_id, work_items.c.state != WorkState.STOPPED)
        .values(
            state=WorkState.STOPPED,
            stopped_at=now,
            stop_requested_at=func.coalesce(work_items.c.stop_requested_at, now),
            token_hash=None,
            lease_until=None,
        )
    )


def session_deleted(conn: Connection, session_id: str) -> None:
    conn.execute(delete(work_items).where(work_items.c.session_id == session_id))


def latest_work(conn: Connection, session_id: str) -> WorkItem | None:
    row = conn.execute(
        select(work_items)
        .where(work_items.c.session_id == session_id)
        .order_by(work_items.c.created_at.desc(), work_items.c.id.desc())
        .limit(1)
    ).first()
    return None if row is None else _item(row)


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
    merged = patched(item.metadata, patch)
    conn.execute(update(work_items).where(work_items.c.id == work_id).values(metadata=merged))
    return _get(conn, workspace_id, environment_id, work_id)


def patched(metadata: dict[str, str], patch: dict[str, Any]) -> dict[str, str]:
    """``metadata`` with ``patch`` merged in: a None or empty value removes its key."""
    merged = dict(metadata)
    for name, value in patch.items():
        if value is None or value == "":
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


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
    _environments.get(conn, workspace_id, environment_id)
    rows = conn.execute(
        select(work_items.c.polled_at, work_items.c.created_at).where(
            work_items.c.workspace_id == workspace_id,
            work_items.c.environment_id == environment_id,
            work_items.c.state == WorkState.QUEUED,
        )
    ).all()
    return queue_stats([(r.polled_at, r.created_at) for r in rows])


def queue_stats(queued: Sequence[tuple[datetime | None, datetime]]) -> QueueStats:
    """Of the (polled_at, created_at) of the queued items: ``depth``, never handed
    out; ``pending``, handed out, not acked."""
    depth = sum(1 for polled_at, _ in queued if polled_at is None)
    oldest = min((created_at for _, created_at in queued), default=None)
    return QueueStats(depth=depth, pending=len(queued) - depth, oldest_queued_at=oldest)
