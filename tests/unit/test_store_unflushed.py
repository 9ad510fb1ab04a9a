"""Unflushed writes (``ConnectionWorkers.run(flush=False)``, the idempotency
keys' claims and kept answers): the one transaction commits without its own
flush, and the writer's next transactions are flushed again, on SQLite and on
PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Connection

from stead.store import ClaimState, SqlStore
from tests.databases import BACKENDS

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", BACKENDS, indirect=True)]
FULL = 2  # SQLite's PRAGMA synchronous code for FULL


def _level(conn: Connection) -> Any:
    if conn.dialect.name == "sqlite":
        return conn.exec_driver_sql("PRAGMA synchronous").scalar()
    return conn.exec_driver_sql("SHOW synchronous_commit").scalar()


async def test_only_the_unflushed_transaction_skips_its_flush(store: SqlStore) -> None:
    writer = store._writer
    before = await writer.run(_level)
    during = await writer.run(_level, flush=False)
    after = await writer.run(_level)
    assert before == after != during
    assert during in (1, "off")  # NORMAL on SQLite
    if before != "on":
        assert before == FULL


async def test_a_claim_written_unflushed_is_seen_by_the_next_request(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    claims = [
        await store.claim_idempotency_key(
            workspace.id, "key", "f", ttl_seconds=60, abandoned_seconds=60
        )
        for _ in range(2)
    ]
    assert [c.state for c in claims] == [ClaimState.CLAIMED, ClaimState.RUNNING]
    assert claims[0].token is not None
    await store.keep_idempotent_answer(
        workspace.id,
        "key",
        claims[0].token,
        status=201,
        content_type=None,
        body=b"{}",
        ttl_seconds=60,
    )
    again = await store.claim_idempotency_key(
        workspace.id, "key", "f", ttl_seconds=60, abandoned_seconds=60
    )
    assert (again.state, again.status, again.body) == (ClaimState.ANSWERED, 201, b"{}")
