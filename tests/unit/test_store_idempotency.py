"""The store's ``Idempotency-Key`` claims on both backends: one holder per key,
answers kept and replayed, expiry and abandoned claims taken over."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest
from sqlalchemy import select

from stead.store import ClaimState, IdempotencyKeyHeld, KeyClaim, PageRequest, SqlStore
from stead.store.tables import idempotency_keys
from tests.databases import STORES, engine
from tests.unit.conftest import definition

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
DAY = 24 * 3600.0
ABANDONED = 600.0


async def _claim(store: SqlStore, workspace_id: str, fingerprint: str = "f") -> ClaimState:
    claim = await store.claim_idempotency_key(
        workspace_id, "key", fingerprint, ttl_seconds=DAY, abandoned_seconds=ABANDONED
    )
    return claim.state


async def test_a_kept_answer_is_replayed_and_another_request_refused(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    claim = await store.claim_idempotency_key(
        workspace.id, "key", "f", ttl_seconds=DAY, abandoned_seconds=ABANDONED
    )
    assert claim.state is ClaimState.CLAIMED and claim.token
    assert await _claim(store, workspace.id) is ClaimState.RUNNING
    await store.keep_idempotent_answer(
        workspace.id,
        "key",
        claim.token,
        status=200,
        content_type="a/b",
        body=b"{}",
        ttl_seconds=DAY,
    )
    again = await store.claim_idempotency_key(
        workspace.id, "key", "f", ttl_seconds=DAY, abandoned_seconds=ABANDONED
    )
    assert (again.state, again.status, again.content_type, again.body) == (
        ClaimState.ANSWERED,
        200,
        "a/b",
        b"{}",
    )
    assert await _claim(store, workspace.id, "other") is ClaimState.MISMATCH
    other = await store.create_workspace("o")
    assert await _claim(store, other.id, "other") is ClaimState.CLAIMED


async def test_a_released_key_is_claimed_again(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    claim = await store.claim_idempotency_key(
        workspace.id, "key", "f", ttl_seconds=DAY, abandoned_seconds=ABANDONED
    )
    assert claim.token
    await store.release_idempotency_key(workspace.id, "key", claim.token)
    assert await _claim(store, workspace.id) is ClaimState.CLAIMED


async def test_concurrent_claims_leave_one_holder(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    states: list[ClaimState] = []

    async def claim() -> None:
        states.append(await _claim(store, workspace.id))

    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(claim)
    assert sorted(s.value for s in states) == ["claimed"] + ["running"] * 7


async def test_expired_and_abandoned_keys_are_taken_over(store: SqlStore) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store._now = lambda: now[0]  # the store reads its clock per write
    workspace = await store.create_workspace("w")
    assert await _claim(store, workspace.id) is ClaimState.CLAIMED
    now[0] += timedelta(seconds=ABANDONED + 1)
    claim = await store.claim_idempotency_key(
        workspace.id, "key", "g", ttl_seconds=DAY, abandoned_seconds=ABANDONED
    )
    assert claim.state is ClaimState.CLAIMED and claim.token
    await store.keep_idempotent_answer(
        workspace.id,
        "key",
        claim.token,
        status=201,
        content_type=None,
        body=b"x",
        ttl_seconds=DAY,
    )
    now[0] += timedelta(seconds=ABANDONED + 1)
    assert await _claim(store, workspace.id, "g") is ClaimState.ANSWERED
    now[0] += timedelta(seconds=DAY)
    assert await _claim(store, workspace.id, "h") is ClaimState.CLAIMED


def _pending(workspace_id: str, fingerprint: str = "f") -> KeyClaim:
    return KeyClaim(workspace_id, "key", fingerprint, ttl_seconds=DAY, abandoned_seconds=ABANDONED)


async def _agents(store: SqlStore, workspace_id: str) -> list[str]:
    page = await store.list_agents(workspace_id, PageRequest(100, "desc"), False, None, None)
    return [agent.id for agent in page.items]


async def test_a_request_claims_its_key_with_its_first_write(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    other = _pending(workspace.id)
    with store.claiming_key(other):
        first = await store.create_agent(workspace.id, definition("a"))
        await store.create_agent(workspace.id, definition("b"))
    assert other.taken and not other.open
    # the key's holder is the request whose write committed it
    assert await _claim(store, workspace.id) is ClaimState.RUNNING
    await store.keep_idempotent_answer(
        workspace.id, "key", other.token, status=200, content_type=None, body=b"1", ttl_seconds=DAY
    )
    assert first.id in await _agents(store, workspace.id)


async def test_a_write_that_finds_its_key_held_writes_nothing(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    holder = _pending(workspace.id)
    with store.claiming_key(holder):
        await store.create_agent(workspace.id, definition("first"))
    before = await _agents(store, workspace.id)
    for fingerprint, state in (("f", ClaimState.RUNNING), ("other", ClaimState.MISMATCH)):
        late = _pending(workspace.id, fingerprint)
        with store.claiming_key(late), pytest.raises(IdempotencyKeyHeld) as held:
            await store.create_agent(workspace.id, definition("second"))
        assert (held.value.claim.state, late.taken) == (state, False)
    assert await _agents(store, workspace.id) == before
    await store.keep_idempotent_answer(
        workspace.id, "key", holder.token, status=201, content_type=None, body=b"x", ttl_seconds=DAY
    )
    late = _pending(workspace.id)
    with store.claiming_key(late), pytest.raises(IdempotencyKeyHeld) as held:
        await store.create_agent(workspace.id, definition("third"))
    assert (held.value.claim.state, held.value.claim.body) == (ClaimState.ANSWERED, b"x")


async def test_only_the_requests_own_task_claims_its_key(store: SqlStore) -> None:
    """A task the request starts (a session's turn) inherits its context but
    outlives it: its writes never carry the request's key."""
    workspace = await store.create_workspace("w")
    pending = _pending(workspace.id)
    with store.claiming_key(pending):
        async with anyio.create_task_group() as group:
            group.start_soon(store.create_agent, workspace.id, definition("child"))
        assert not pending.taken
    await store.create_agent(workspace.id, definition("after"))  # outside: no key either
    assert (pending.taken, await _claim(store, workspace.id)) == (False, ClaimState.CLAIMED)


async def test_concurrent_keyed_writes_leave_one_object(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    outcomes: list[str] = []

    async def create() -> None:
        pending = _pending(workspace.id)
        with store.claiming_key(pending):
            try:
                await store.create_agent(workspace.id, definition("racer"))
                outcomes.append("made")
            except IdempotencyKeyHeld as held:
                outcomes.append(held.claim.state.value)

    async with anyio.create_task_group() as group:
        for _ in range(6):
            group.start_soon(create)
    assert sorted(outcomes) == ["made"] + ["running"] * 5
    assert len(await _agents(store, workspace.id)) == 1


@pytest.mark.sql
async def test_keeping_an_answer_deletes_expired_keys(store: SqlStore, database_url: str) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    store._now = lambda: now[0]
    workspace = await store.create_workspace("w")
    for key in ("old-1", "old-2"):
        await store.claim_idempotency_key(
            workspace.id, key, "f", ttl_seconds=DAY, abandoned_seconds=ABANDONED
        )
    now[0] += timedelta(seconds=DAY + 1)
    claim = await store.claim_idempotency_key(
        workspace.id, "new", "f", ttl_seconds=DAY, abandoned_seconds=ABANDONED
    )
    assert claim.token
    await store.keep_idempotent_answer(
        workspace.id, "new", claim.token, status=200, content_type=None, body=b"", ttl_seconds=DAY
    )
    direct = engine(database_url)
    try:
        with direct.connect() as conn:
            rows = conn.execute(select(idempotency_keys.c.key, idempotency_keys.c.status)).all()
    finally:
        direct.dispose()
    assert [tuple(row) for row in rows] == [("new", 200)]
