"""The store's ``Idempotency-Key`` claims on both backends: one holder per key,
answers kept and replayed, expiry and abandoned claims taken over."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from stead.store import ClaimState, SqlStore
from tests.databases import STORES

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
