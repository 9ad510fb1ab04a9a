"""Which sandbox host holds a session's sandbox, as its lease records it, on
every backend (SQLite, PostgreSQL, the in-memory store): recorded on the first
acquire that names a host and kept after, moved only from the placement the
mover saw (of concurrent movers one wins), cleared when the sandbox is
destroyed, and the placement each op started at kept in the ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from stead.ids import new_id
from stead.store import (
    ClaimTerms,
    LeaseExpiry,
    LeaseHost,
    LeaseTerms,
    RunWrite,
    SandboxLease,
    SqlStore,
)
from tests.databases import STORES
from tests.unit.conftest import new_session

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
T0 = datetime(2030, 1, 1, tzinfo=UTC)
A = LeaseHost("host-a", "tcp://127.0.0.1:7001")
B = LeaseHost("host-b", "tcp://127.0.0.1:7002")
C = LeaseHost("host-c", None)


async def _terms(store: SqlStore, host: LeaseHost | None, ttl: float = 60.0) -> LeaseTerms:
    workspace_id, session_id = await new_session(store)
    session = await store.get_session(workspace_id, session_id)
    return LeaseTerms(session_id, workspace_id, session_id, session.environment_id, None, ttl, host)


async def _acquire(
    store: SqlStore, terms: LeaseTerms, host: LeaseHost | None, now: datetime = T0
) -> SandboxLease:
    return await store.acquire_sandbox_lease(
        terms.sandbox_id,
        workspace_id=terms.workspace_id,
        session_id=terms.session_id,
        environment_id=terms.environment_id,
        agent_id=None,
        ttl_seconds=terms.ttl_seconds,
        host=host,
        now=now,
    )


def _where(lease: SandboxLease | None) -> tuple[str | None, str | None, int]:
    assert lease is not None
    return lease.host_id, lease.host_address, lease.placement


async def test_the_first_host_is_recorded_and_kept_by_every_later_acquire(store: SqlStore) -> None:
    terms = await _terms(store, None)
    assert _where(await _acquire(store, terms, None)) == (None, None, 0)
    assert _where(await _acquire(store, terms, A)) == ("host-a", A.address, 1)
    assert _where(await _acquire(store, terms, B)) == ("host-a", A.address, 1)
    assert _where(await store.sandbox_lease(terms.sandbox_id)) == ("host-a", A.address, 1)


async def test_a_move_from_a_stale_placement_changes_nothing(store: SqlStore) -> None:
    terms = await _terms(store, None)
    await _acquire(store, terms, A)
    moved = await store.move_sandbox_lease(terms.sandbox_id, placement=1, host=B)
    assert _where(moved) == ("host-b", B.address, 2)
    late = await store.move_sandbox_lease(terms.sandbox_id, placement=1, host=C)
    assert _where(late) == ("host-b", B.address, 2)  # where it went: the late mover follows
    assert _where(await store.move_sandbox_lease(terms.sandbox_id, placement=2, host=C)) == (
        "host-c",
        None,
        3,
    )
    await store.expire_sandbox_lease(terms.sandbox_id, reason=LeaseExpiry.EXPLICIT)
    assert await store.move_sandbox_lease(terms.sandbox_id, placement=3, host=A) is None
    assert await store.move_sandbox_lease("no-such-sandbox", placement=0, host=A) is None


async def test_of_concurrent_movers_exactly_one_moves_the_lease(store: SqlStore) -> None:
    terms = await _terms(store, None)
    await _acquire(store, terms, A)
    hosts = [LeaseHost(f"host-{i}", f"tcp://127.0.0.1:{8000 + i}") for i in range(8)]
    seen: list[SandboxLease | None] = []

    async def move(host: LeaseHost) -> None:
        seen.append(await store.move_sandbox_lease(terms.sandbox_id, placement=1, host=host))

    async with anyio.create_task_group() as group:
        for host in hosts:
            group.start_soon(move, host)
    final = await store.sandbox_lease(terms.sandbox_id)
    assert final is not None and final.placement == 2
    assert final.host_id in {h.host_id for h in hosts}
    assert all(_where(lease) == _where(final) for lease in seen)


async def test_a_destroyed_sandbox_holds_no_host_and_an_expired_one_keeps_its_own(
    store: SqlStore,
) -> None:
    terms = await _terms(store, None)
    await _acquire(store, terms, A)
    await store.expire_sandbox_lease(terms.sandbox_id, now=T0)
    # Expired, not destroyed yet: the sandbox is still on host A, which keeps it.
    assert _where(await _acquire(store, terms, B, T0 + timedelta(seconds=1))) == (
        "host-a",
        A.address,
        1,
    )
    await store.expire_sandbox_lease(terms.sandbox_id, now=T0)
    assert await store.mark_sandbox_destroyed(terms.sandbox_id)
    assert _where(await store.sandbox_lease(terms.sandbox_id)) == (None, None, 1)
    assert _where(await _acquire(store, terms, B, T0 + timedelta(seconds=2))) == (
        "host-b",
        B.address,
        2,
    )


async def test_an_op_keeps_the_placement_it_started_at(store: SqlStore) -> None:
    terms = await _terms(store, A)
    await store.start_run(terms.sandbox_id)
    opening = lambda _attempts: []  # noqa: E731
    taken = await store.claim_next(terms.sandbox_id, ClaimTerms("brain", 30.0, opening))
    assert taken is not None
    first = await store.run_write(
        taken.claim, RunWrite(ops_started=[("op-tool", "tool:bash")], lease=terms)
    )
    assert first.started == {"op-tool": None}
    assert _where(first.lease) == ("host-a", A.address, 1)
    await store.move_sandbox_lease(terms.sandbox_id, placement=1, host=B)
    again = await store.run_write(
        taken.claim,
        RunWrite(ops_started=[("op-tool", "tool:bash"), ("op-model", "model")], lease=terms),
    )
    previous = again.started["op-tool"]
    assert previous is not None and previous.placement == 1
    assert _where(again.lease) == ("host-b", B.address, 2)
    unleased = await store.run_write(taken.claim, RunWrite(ops_started=[("op-model", "model")]))
    recorded = unleased.started["op-model"]
    assert recorded is not None and recorded.placement == 2
    plain = await store.run_write(taken.claim, RunWrite(ops_started=[(new_id("event"), "model")]))
    assert plain.lease is None
