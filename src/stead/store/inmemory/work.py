"""Work items and environment keys of self-hosted environments in memory
(``_work.py``'s rules: an item's claim, ack, heartbeat and stop are its
``Step`` planners, checked against ``work.TRANSITIONS`` here as there).
Secrets are kept as SHA-256 hashes only."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from stead.store import _work
from stead.store._workspaces import hash_secret
from stead.store.errors import NotFound
from stead.store.inmemory import agents
from stead.store.inmemory.tables import Tables, held, page_of
from stead.store.paging import Page, PageRequest
from stead.store.work import (
    LIVE_STATES,
    Claimed,
    EnvironmentKey,
    QueueStats,
    WorkItem,
    WorkState,
    WorkToken,
    check_transition,
)

JSON = ("metadata",)


def create_environment_key(
    t: Tables, now: datetime, workspace_id: str, environment_id: str
) -> tuple[EnvironmentKey, str]:
    env = agents.get_environment(t, workspace_id, environment_id)
    key, secret = _work.new_environment_key(now, env)
    t.environment_keys[key.id] = (key, hash_secret(secret))
    return key, secret


def revoke_environment_key(
    t: Tables, now: datetime, workspace_id: str, environment_id: str, key_id: str
) -> EnvironmentKey:
    found = t.environment_keys.get(key_id)
    if found is None or (found[0].workspace_id, found[0].environment_id) != (
        workspace_id,
        environment_id,
    ):
        raise NotFound("environment key", key_id)
    key, hashed = found
    if key.revoked_at is None:
        key = replace(key, revoked_at=now)
        t.environment_keys[key_id] = (key, hashed)
    for claimed in list(t.work_items.values()):
        item = claimed.record()
        if item.key_id == key_id and item.state != WorkState.STOPPED:
            _change(t, item, _work.key_revoked(item, now))
    return key


def authenticate_environment_key(t: Tables, secret: str) -> EnvironmentKey | None:
    hashed = hash_secret(secret)
    return next(
        (k for k, h in t.environment_keys.values() if h == hashed and k.revoked_at is None), None
    )


def authenticate_work_token(t: Tables, secret: str) -> WorkToken | None:
    hashed = hash_secret(secret)
    for work_id, token_hash in t.work_tokens.items():
        item = t.work_items[work_id].kept
        key = t.environment_keys.get(item.key_id or "")
        revoked = key is not None and key[0].revoked_at is not None
        if token_hash == hashed and item.state != WorkState.STOPPED and not revoked:
            return WorkToken(
                item.workspace_id, item.environment_id, item.id, item.session_id, item.epoch
            )
    return None


def get_work(t: Tables, workspace_id: str, environment_id: str, work_id: str) -> WorkItem:
    found = t.work_items.get(work_id)
    if found is None or (found.kept.workspace_id, found.kept.environment_id) != (
        workspace_id,
        environment_id,
    ):
        raise NotFound("work", work_id)
    return found.record()


def ensure_work_item(
    t: Tables,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    session_id: str,
    ttl_seconds: float,
) -> WorkItem | None:
    if not _work.is_self_hosted(agents.get_environment(t, workspace_id, environment_id)):
        return None
    for found in t.work_items.values():
        if found.kept.session_id == session_id and found.kept.state in LIVE_STATES:
            return found.record()
    latest = latest_work(t, session_id)
    if _work.unsettled_stop(latest):
        return latest
    item = _work.new_item(now, workspace_id, environment_id, session_id, ttl_seconds)
    t.work_items[item.id] = held(item, *JSON)
    return get_work(t, workspace_id, environment_id, item.id)


def _change(t: Tables, item: WorkItem, step: _work.Step) -> WorkItem:
    """``_work._change``: the step applied (no fence to check: nothing else runs)."""
    new, values = step
    if new is not None:
        check_transition(item.state, new)
        values = {**values, "state": new}
    if "token_hash" in values:
        values = dict(values)
        token_hash = values.pop("token_hash")
        if token_hash is None:
            t.work_tokens.pop(item.id, None)
        else:
            t.work_tokens[item.id] = token_hash
    t.work_items[item.id] = held(replace(item, **values), *JSON)
    return t.work_items[item.id].record()


def poll_work(
    t: Tables,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    worker_id: str | None,
    reclaim_after: float,
    key_id: str | None = None,
) -> Claimed | None:
    agents.get_environment(t, workspace_id, environment_id)
    items = [
        found.record()
        for found in t.work_items.values()
        if (found.kept.workspace_id, found.kept.environment_id) == (workspace_id, environment_id)
    ]
    ready = [item for item in items if _work.claimable(item, now, reclaim_after)]
    if not ready:
        return None
    item = min(ready, key=lambda i: (i.created_at, i.id))
    step, token = _work.claim(item, now, worker_id, key_id)
    return Claimed(_change(t, item, step), token)


def ack_work(
    t: Tables, now: datetime, workspace_id: str, environment_id: str, work_id: str
) -> WorkItem:
    item = get_work(t, workspace_id, environment_id, work_id)
    step = _work.ack(item, now)
    return item if step is None else _change(t, item, step)


def heartbeat_work(
    t: Tables,
    now: datetime,
    workspace_id: str,
    environment_id: str,
    work_id: str,
    expected: str | None,
    ttl_seconds: float,
    epoch: int | None,
) -> tuple[WorkItem, bool]:
    item = get_work(t, workspace_id, environment_id, work_id)
    steps = _work.heartbeat(item, now, expected, ttl_seconds, epoch)
    for step in steps:
        item = _change(t, item, step)
    return item, bool(steps)


def stop_work(
    t: Tables, now: datetime, workspace_id: str, environment_id: str, work_id: str, force: bool
) -> WorkItem:
    item = get_work(t, workspace_id, environment_id, work_id)
    step = _work.stop(item, now, force)
    return item if step is None else _change(t, item, step)


def latest_work(t: Tables, session_id: str) -> WorkItem | None:
    """``_work.latest_work``."""
    mine = [found for found in t.work_items.values() if found.kept.session_id == session_id]
    if not mine:
        return None
    return max(mine, key=lambda found: (found.kept.created_at, found.kept.id)).record()


def settled_work(t: Tables, _now: datetime, work_id: str, epoch: int) -> None:
    found = t.work_items.get(work_id)
    if found is not None and found.kept.epoch == epoch:
        t.work_items[work_id] = replace(found, kept=replace(found.kept, in_doubt=False))


def update_work_metadata(
    t: Tables,
    _now: datetime,
    workspace_id: str,
    environment_id: str,
    work_id: str,
    patch: dict[str, Any],
) -> WorkItem:
    item = get_work(t, workspace_id, environment_id, work_id)
    merged = _work.patched(item.metadata, patch)
    t.work_items[work_id] = held(replace(item, metadata=merged), *JSON)
    return get_work(t, workspace_id, environment_id, work_id)


def _of(t: Tables, workspace_id: str, environment_id: str) -> list[WorkItem]:
    agents.get_environment(t, workspace_id, environment_id)
    return [
        found.kept
        for found in t.work_items.values()
        if (found.kept.workspace_id, found.kept.environment_id) == (workspace_id, environment_id)
    ]


def list_work(
    t: Tables, workspace_id: str, environment_id: str, page: PageRequest
) -> Page[WorkItem]:
    found = page_of(_of(t, workspace_id, environment_id), lambda i: (i.created_at, i.id), page)
    items = [t.work_items[i.id].record() for i in found.items]
    return Page(items, found.has_next, found.has_prev)


def work_stats(t: Tables, workspace_id: str, environment_id: str) -> QueueStats:
    queued = [i for i in _of(t, workspace_id, environment_id) if i.state == WorkState.QUEUED]
    return _work.queue_stats([(i.polled_at, i.created_at) for i in queued])


def session_archived(t: Tables, now: datetime, session_id: str) -> None:
    """``_work.session_archived``."""
    for found in list(t.work_items.values()):
        item = found.record()
        if item.session_id == session_id and item.state != WorkState.STOPPED:
            step = _work.stop(item, now, force=True)
            assert step is not None
            _change(t, item, step)


def session_deleted(t: Tables, session_id: str) -> None:
    for work_id in [k for k, found in t.work_items.items() if found.kept.session_id == session_id]:
        del t.work_items[work_id]
        t.work_tokens.pop(work_id, None)
