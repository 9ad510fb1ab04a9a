"""The work queue of self-hosted environments on every store: environment keys,
an item's claim, ack, heartbeats and stop, and a lapsed claim taken over in doubt."""

from __future__ import annotations

import pytest

from stead.store import Conflict, PageRequest, SqlStore
from stead.store.work import NO_HEARTBEAT, HeartbeatRefused, WorkState
from tests.databases import STORES
from tests.unit.conftest import definition

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
TTL = 60.0


async def _environment(store: SqlStore, kind: str = "self_hosted") -> tuple[str, str]:
    workspace = (await store.create_workspace("w")).id
    env = await store.create_environment(workspace, kind, None, {"type": kind}, {}, None)
    return workspace, env.id


async def test_a_self_hosted_environments_key_authenticates_until_revoked(
    store: SqlStore,
) -> None:
    workspace, cloud = await _environment(store, "cloud")
    with pytest.raises(Conflict, match="not self_hosted"):
        await store.create_environment_key(workspace, cloud)
    assert await store.ensure_work_item(workspace, cloud, "sesn_a", TTL) is None
    env = (
        await store.create_environment(workspace, "h", None, {"type": "self_hosted"}, {}, None)
    ).id
    key, secret = await store.create_environment_key(workspace, env)
    assert secret.endswith(key.hint)
    assert await store.authenticate_environment_key(secret) == key
    assert await store.authenticate_environment_key(secret + "x") is None
    revoked = await store.revoke_environment_key(workspace, env, key.id)
    again = await store.revoke_environment_key(workspace, env, key.id)
    assert again.revoked_at == revoked.revoked_at is not None
    assert await store.authenticate_environment_key(secret) is None


async def test_an_item_is_claimed_acked_beaten_and_stopped(store: SqlStore) -> None:
    workspace, env = await _environment(store)
    item = await store.ensure_work_item(workspace, env, "sesn_a", TTL)
    assert item is not None and item.state == WorkState.QUEUED
    assert await store.ensure_work_item(workspace, env, "sesn_a", TTL) == item
    stats = await store.work_stats(workspace, env)
    assert (stats.depth, stats.pending, stats.oldest_queued_at) == (1, 0, item.created_at)
    claimed = await store.poll_work(workspace, env, "worker-1", 30.0)
    assert claimed is not None and claimed.item.epoch == 1
    assert await store.poll_work(workspace, env, "worker-2", 30.0) is None  # just handed out
    token = await store.authenticate_work_token(claimed.token)
    assert token is not None and (token.work_id, token.epoch) == (item.id, 1)
    assert (await store.work_stats(workspace, env)).pending == 1
    acked = await store.ack_work(workspace, env, item.id)
    assert (
        acked.state == WorkState.STARTING and await store.ack_work(workspace, env, item.id) == acked
    )
    with pytest.raises(HeartbeatRefused):
        await store.heartbeat_work(workspace, env, item.id, "not the last one", TTL, 1)
    beaten, extended = await store.heartbeat_work(workspace, env, item.id, NO_HEARTBEAT, TTL, 1)
    assert extended and beaten.state == WorkState.ACTIVE and beaten.last_heartbeat is not None
    again, _ = await store.heartbeat_work(workspace, env, item.id, beaten.last_heartbeat, TTL, 1)
    assert again.started_at == beaten.started_at
    stopping = await store.stop_work(workspace, env, item.id, force=False)
    assert stopping.state == WorkState.STOPPING and stopping.stop_requested_at is not None
    stopped = await store.stop_work(workspace, env, item.id, force=True)
    assert stopped.state == WorkState.STOPPED
    assert stopped.stop_requested_at == stopping.stop_requested_at
    assert await store.authenticate_work_token(claimed.token) is None
    assert await store.heartbeat_work(workspace, env, item.id, None, TTL, None) == (stopped, False)
    with pytest.raises(Conflict, match="already stopped"):
        await store.stop_work(workspace, env, item.id, force=True)
    with pytest.raises(Conflict):
        await store.ack_work(workspace, env, item.id)
    # Its worker may have started the session's calls: no item is queued
    # before they are answered (then settled), or a new worker runs them again.
    assert stopped.in_doubt
    assert await store.ensure_work_item(workspace, env, "sesn_a", TTL) == stopped
    await store.settled_work(item.id, stopped.epoch)
    fresh = await store.ensure_work_item(workspace, env, "sesn_a", TTL)
    assert fresh is not None and fresh.id != item.id
    # One never held leaves nothing in doubt.
    unheld = await store.stop_work(workspace, env, fresh.id, force=True)
    assert not unheld.in_doubt
    assert await store.ensure_work_item(workspace, env, "sesn_a", TTL) not in (None, unheld)


async def test_a_lapsed_claim_is_taken_over_in_doubt(store: SqlStore) -> None:
    workspace, env = await _environment(store)
    item = await store.ensure_work_item(workspace, env, "sesn_a", TTL)
    assert item is not None
    first = await store.poll_work(workspace, env, "worker-1", 30.0)
    assert first is not None
    await store.heartbeat_work(workspace, env, item.id, None, -1.0, 1)  # its lease lapsed
    second = await store.poll_work(workspace, env, "worker-2", 30.0)
    assert second is not None
    taken = second.item
    assert (taken.state, taken.epoch, taken.worker_id, taken.in_doubt) == (
        WorkState.QUEUED,
        2,
        "worker-2",
        True,
    )
    assert await store.authenticate_work_token(first.token) is None  # revoked by the new claim
    with pytest.raises(HeartbeatRefused):
        await store.heartbeat_work(workspace, env, item.id, None, TTL, 1)
    await store.settled_work(item.id, 1)  # an older claim's settling changes nothing
    assert (await store.get_work(workspace, env, item.id)).in_doubt
    await store.settled_work(item.id, 2)
    assert not (await store.get_work(workspace, env, item.id)).in_doubt


async def test_revoking_a_key_ends_the_claims_polled_with_it(store: SqlStore) -> None:
    """A held item is claimable at once, in doubt; a claim of another key stays."""
    workspace, env = await _environment(store)
    revoked, _ = await store.create_environment_key(workspace, env)
    kept, _ = await store.create_environment_key(workspace, env)
    held, other = [await store.ensure_work_item(workspace, env, s, TTL) for s in ("sesn_a", "b")]
    assert held is not None and other is not None
    first = await store.poll_work(workspace, env, "worker-1", 30.0, revoked.id)
    second = await store.poll_work(workspace, env, "worker-2", 30.0, kept.id)
    assert first is not None and second is not None and first.item.id == held.id
    await store.ack_work(workspace, env, held.id)
    await store.heartbeat_work(workspace, env, held.id, None, 3600.0, 1)
    await store.revoke_environment_key(workspace, env, revoked.id)
    assert await store.authenticate_work_token(first.token) is None
    assert await store.authenticate_work_token(second.token) is not None
    taken = await store.poll_work(workspace, env, "worker-2", 30.0, kept.id)
    assert taken is not None and (taken.item.id, taken.item.in_doubt) == (held.id, True)


async def test_metadata_merges_and_items_page_in_order(store: SqlStore) -> None:
    workspace, env = await _environment(store)
    made = [await store.ensure_work_item(workspace, env, f"sesn_{n}", TTL) for n in range(3)]
    items = sorted((i for i in made if i is not None), key=lambda i: (i.created_at, i.id))
    first = items[0].id
    await store.update_work_metadata(workspace, env, first, {"a": "1", "b": "2"})
    merged = await store.update_work_metadata(workspace, env, first, {"a": None, "b": "", "c": "3"})
    assert merged.metadata == {"c": "3"}
    merged.metadata["c"] = "changed by the caller"
    assert (await store.get_work(workspace, env, first)).metadata == {"c": "3"}
    page = await store.list_work(workspace, env, PageRequest(limit=2, order="asc"))
    assert [i.id for i in page.items] == [i.id for i in items[:2]] and page.has_next


async def test_a_stopping_item_serves_its_session_and_an_ended_session_has_no_work(
    store: SqlStore,
) -> None:
    """A stopping item's worker may still run the session's calls: no second
    item is queued beside it. Archived, a session's items stop (their tokens
    with them); deleted, they go."""
    workspace, env = await _environment(store)
    agent = await store.create_agent(workspace, definition())
    sessions = []
    for _ in range(2):
        made, _ = await store.create_session(
            workspace, (agent.id, None), lambda a: {"id": a.id}, env, {}, []
        )
        sessions.append(made.id)
    kept, gone = sessions
    item = await store.ensure_work_item(workspace, env, kept, TTL)
    assert item is not None
    claimed = await store.poll_work(workspace, env, "worker-1", 30.0)
    assert claimed is not None
    await store.ack_work(workspace, env, item.id)
    stopping = await store.stop_work(workspace, env, item.id, force=False)
    assert await store.ensure_work_item(workspace, env, kept, TTL) == stopping
    await store.archive_session(workspace, kept)
    [archived] = (await store.list_work(workspace, env, PageRequest(limit=10, order="asc"))).items
    assert (archived.id, archived.state) == (item.id, WorkState.STOPPED)
    assert await store.authenticate_work_token(claimed.token) is None
    await store.ensure_work_item(workspace, env, gone, TTL)
    await store.delete_session(workspace, gone)
    listed = (await store.list_work(workspace, env, PageRequest(limit=10, order="asc"))).items
    assert [i.id for i in listed] == [item.id]
