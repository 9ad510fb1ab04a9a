"""Sandbox leases and sandbox usage in the SQL store, on real SQLite files and
real PostgreSQL databases (the lease logic is written for both: ON CONFLICT and
row locks)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from alembic import command
from sqlalchemy import func, insert, inspect, select, text, update

from stead.store import (
    Conflict,
    LeaseExpiry,
    SandboxLeaseEnded,
    SandboxLeaseStatus,
    SqlStore,
    migrate,
    open_store,
)
from stead.store.migrate import alembic_config
from stead.store.tables import sandbox_leases, sessions, workspaces
from tests.databases import STORES
from tests.databases import engine as engine_of
from tests.unit.conftest import new_session

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
T0 = datetime(2030, 1, 1, tzinfo=UTC)
TTL = 60.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass(frozen=True)
class Db:
    store: SqlStore
    url: str


@dataclass(frozen=True)
class Owner:
    workspace_id: str
    session_id: str
    environment_id: str
    agent_id: str


@pytest.fixture
def db(store: SqlStore, database_url: str) -> Db:
    return Db(store, database_url)


async def new_owner(store: SqlStore) -> Owner:
    workspace_id, session_id = await new_session(store)
    session = await store.get_session(workspace_id, session_id)
    return Owner(workspace_id, session_id, session.environment_id, session.agent["id"])


async def acquire_session_sandbox(
    store: SqlStore, owner: Owner, now: datetime, ttl: float = TTL
) -> None:
    await store.acquire_sandbox_lease(
        owner.session_id,
        workspace_id=owner.workspace_id,
        session_id=owner.session_id,
        environment_id=owner.environment_id,
        agent_id=owner.agent_id,
        ttl_seconds=ttl,
        now=now,
    )


def shared_id(owner: Owner) -> str:
    return f"{owner.agent_id}::{owner.environment_id}"


async def acquire_shared_sandbox(store: SqlStore, owner: Owner, now: datetime) -> None:
    await store.acquire_sandbox_lease(
        shared_id(owner),
        workspace_id=owner.workspace_id,
        session_id=None,
        environment_id=owner.environment_id,
        agent_id=owner.agent_id,
        ttl_seconds=TTL,
        now=now,
    )


async def run_sql(url: str, statement: object) -> None:
    """Runs one write on a connection of its own, off the event loop."""

    def run() -> None:
        engine = engine_of(url)
        try:
            with engine.begin() as conn:
                conn.execute(statement)  # type: ignore[call-overload]
        finally:
            engine.dispose()

    await anyio.to_thread.run_sync(run)


async def terminate(db: Db, session_id: str) -> None:
    stmt = update(sessions).where(sessions.c.id == session_id).values(terminated_at=at(1))
    await run_sql(db.url, stmt)


async def read_one(url: str, statement: object) -> object:
    """The first column of the first row, read on a connection of its own, off the loop."""

    def read() -> object:
        engine = engine_of(url)
        try:
            with engine.connect() as conn:
                return conn.execute(statement).scalar()  # type: ignore[call-overload]
        finally:
            engine.dispose()

    return await anyio.to_thread.run_sync(read)


async def lease_rows(url: str) -> object:
    return await read_one(url, select(func.count()).select_from(sandbox_leases))


async def lease_status(url: str, sandbox_id: str) -> object:
    column = sandbox_leases.c.status
    return await read_one(url, select(column).where(sandbox_leases.c.sandbox_id == sandbox_id))


@pytest.mark.sql
async def test_acquire_creates_then_renews_the_same_lease(db: Db) -> None:
    owner = await new_owner(db.store)
    first = await db.store.acquire_sandbox_lease(
        owner.session_id,
        workspace_id=owner.workspace_id,
        session_id=owner.session_id,
        environment_id=owner.environment_id,
        agent_id=owner.agent_id,
        ttl_seconds=TTL,
        now=T0,
    )
    assert first.status == SandboxLeaseStatus.ACTIVE and first.expiry_reason is None
    assert (first.created_at, first.last_activity_at, first.expires_at) == (T0, T0, at(TTL))
    again = await db.store.acquire_sandbox_lease(
        owner.session_id,
        workspace_id=owner.workspace_id,
        session_id=owner.session_id,
        environment_id=owner.environment_id,
        agent_id=owner.agent_id,
        ttl_seconds=TTL,
        now=at(30),
    )
    assert again.created_at == T0
    assert (again.last_activity_at, again.expires_at) == (at(30), at(30 + TTL))
    assert await lease_rows(db.url) == 1
    assert await db.store.expire_sandbox_leases(now=at(TTL + 1)) == []


@pytest.mark.sql
async def test_a_hundred_concurrent_acquires_leave_one_row(db: Db) -> None:
    owner = await new_owner(db.store)
    # Four stores on one file: four writer threads contend for SQLite's write lock.
    others = [await open_store(db.url) for _ in range(3)]
    stores = [db.store, *others]
    leases = []

    async def acquire(i: int) -> None:
        leases.append(
            await stores[i % len(stores)].acquire_sandbox_lease(
                owner.session_id,
                workspace_id=owner.workspace_id,
                session_id=owner.session_id,
                environment_id=owner.environment_id,
                agent_id=owner.agent_id,
                ttl_seconds=TTL,
                now=at(i / 1000),
            )
        )

    try:
        async with anyio.create_task_group() as group:
            for i in range(100):
                group.start_soon(acquire, i)
    finally:
        for store in others:
            await store.close()
    assert len(leases) == 100
    assert {lease.created_at for lease in leases} == {leases[0].created_at}
    assert {lease.status for lease in leases} == {SandboxLeaseStatus.ACTIVE}
    assert await lease_rows(db.url) == 1


async def test_renew_extends_only_an_active_lease(db: Db) -> None:
    owner = await new_owner(db.store)
    assert not await db.store.renew_sandbox_lease(owner.session_id, now=T0)
    await acquire_session_sandbox(db.store, owner, T0)
    assert await db.store.renew_sandbox_lease(owner.session_id, now=at(50))
    assert await db.store.expire_sandbox_leases(now=at(TTL + 1)) == []
    [expired] = await db.store.expire_sandbox_leases(now=at(50 + TTL))
    assert expired.last_activity_at == at(50) and expired.expires_at == at(50 + TTL)
    assert not await db.store.renew_sandbox_lease(owner.session_id, now=at(200))


@pytest.mark.sql
async def test_every_condition_expires_its_lease_with_its_reason(db: Db) -> None:
    store = db.store
    live, idle, terminated, deleted, archived = [await new_owner(store) for _ in range(5)]
    for owner in (live, terminated, deleted):
        await acquire_session_sandbox(store, owner, T0, ttl=1000)
    await acquire_session_sandbox(store, idle, T0, ttl=5)
    await acquire_shared_sandbox(store, archived, T0)
    # An environment deleted outright (its only session archived first) counts as archived.
    gone = await new_owner(store)
    await acquire_shared_sandbox(store, gone, T0)
    await store.archive_session(gone.workspace_id, gone.session_id)
    await store.delete_environment(gone.workspace_id, gone.environment_id)

    await terminate(db, terminated.session_id)
    await store.delete_session(deleted.workspace_id, deleted.session_id)
    await store.archive_environment(archived.workspace_id, archived.environment_id)
    expired = await store.expire_sandbox_leases(now=at(10))

    assert {lease.sandbox_id: lease.expiry_reason for lease in expired} == {
        idle.session_id: LeaseExpiry.TTL,
        terminated.session_id: LeaseExpiry.SESSION_TERMINATED,
        deleted.session_id: LeaseExpiry.SESSION_DELETED,
        shared_id(archived): LeaseExpiry.ENVIRONMENT_ARCHIVED,
        shared_id(gone): LeaseExpiry.ENVIRONMENT_ARCHIVED,
    }
    assert {(lease.status, lease.expired_at) for lease in expired} == {
        (SandboxLeaseStatus.EXPIRED, at(10))
    }
    assert await store.expire_sandbox_leases(now=at(11)) == []
    assert await lease_status(db.url, live.session_id) == SandboxLeaseStatus.ACTIVE
    assert await store.renew_sandbox_lease(live.session_id, now=at(12))


@pytest.mark.sql
async def test_a_named_condition_wins_over_the_ttl(db: Db) -> None:
    owner = await new_owner(db.store)
    await acquire_session_sandbox(db.store, owner, T0, ttl=5)
    await terminate(db, owner.session_id)
    [expired] = await db.store.expire_sandbox_leases(now=at(100))
    assert expired.expiry_reason == LeaseExpiry.SESSION_TERMINATED


@pytest.mark.sql
async def test_a_terminated_or_deleted_sessions_sandbox_is_never_revived(db: Db) -> None:
    store = db.store
    terminated, deleted, late = [await new_owner(store) for _ in range(3)]
    for owner in (terminated, deleted):
        await acquire_session_sandbox(store, owner, T0)
    await terminate(db, terminated.session_id)
    await store.delete_session(deleted.workspace_id, deleted.session_id)
    await store.expire_sandbox_leases(now=at(1))
    await store.mark_sandbox_destroyed(deleted.session_id, now=at(2))
    for owner, reason in (
        (terminated, LeaseExpiry.SESSION_TERMINATED),
        (deleted, LeaseExpiry.SESSION_DELETED),
    ):
        with pytest.raises(SandboxLeaseEnded) as ended:
            await acquire_session_sandbox(store, owner, at(3))
        assert (ended.value.sandbox_id, ended.value.reason) == (owner.session_id, reason)
    # No lease yet, session already terminated: refused, and nothing is written.
    await terminate(db, late.session_id)
    with pytest.raises(SandboxLeaseEnded):
        await acquire_session_sandbox(store, late, at(3))
    assert await lease_rows(db.url) == 2
    assert not await store.renew_sandbox_lease(terminated.session_id, now=at(4))


async def test_an_archived_sessions_lease_ends_with_it_and_is_never_taken_again(db: Db) -> None:
    """Archived, a session takes no turns nor terminals again (nor is it ever
    unarchived): a named condition, on every store, as a termination is."""
    store = db.store
    archived, late = await new_owner(store), await new_owner(store)
    await acquire_session_sandbox(store, archived, T0)
    await store.archive_session(archived.workspace_id, archived.session_id)
    [expired] = await store.expire_sandbox_leases(now=at(1))
    assert (expired.sandbox_id, expired.expiry_reason) == (
        archived.session_id,
        LeaseExpiry.SESSION_ARCHIVED,
    )
    await store.archive_session(late.workspace_id, late.session_id)
    for owner in (archived, late):
        with pytest.raises(SandboxLeaseEnded) as ended:
            await acquire_session_sandbox(store, owner, at(2))
        assert ended.value.reason == LeaseExpiry.SESSION_ARCHIVED


async def test_an_archived_environment_refuses_its_shared_sandbox(db: Db) -> None:
    owner = await new_owner(db.store)
    await acquire_shared_sandbox(db.store, owner, T0)
    await db.store.archive_environment(owner.workspace_id, owner.environment_id)
    with pytest.raises(SandboxLeaseEnded) as ended:
        await acquire_shared_sandbox(db.store, owner, at(1))
    assert ended.value.reason == LeaseExpiry.ENVIRONMENT_ARCHIVED


@pytest.mark.sql
async def test_a_lease_ended_by_ttl_or_explicitly_is_replaced_on_acquire(db: Db) -> None:
    store = db.store
    owner = await new_owner(store)
    await acquire_session_sandbox(store, owner, T0, ttl=5)
    [expired] = await store.expire_sandbox_leases(now=at(10))
    assert expired.expiry_reason == LeaseExpiry.TTL
    assert await store.mark_sandbox_destroyed(owner.session_id, now=at(11))
    await acquire_session_sandbox(store, owner, at(20))
    assert await store.renew_sandbox_lease(owner.session_id, now=at(21))

    assert await store.expire_sandbox_lease(owner.session_id, now=at(22))
    assert not await store.expire_sandbox_lease(owner.session_id, now=at(23))
    [pending] = await store.leases_to_destroy()
    assert (pending.expiry_reason, pending.expired_at) == (LeaseExpiry.EXPLICIT, at(22))
    revived = await store.acquire_sandbox_lease(
        owner.session_id,
        workspace_id=owner.workspace_id,
        session_id=owner.session_id,
        environment_id=owner.environment_id,
        agent_id=owner.agent_id,
        ttl_seconds=TTL,
        now=at(30),
    )
    assert revived.status == SandboxLeaseStatus.ACTIVE
    assert (revived.created_at, revived.expires_at) == (at(30), at(30 + TTL))
    assert (revived.expiry_reason, revived.expired_at, revived.destroyed_at) == (None, None, None)
    assert await store.leases_to_destroy() == []
    # The sweeper's late bookkeeping for the old lease leaves the new one alone.
    assert not await store.mark_sandbox_destroyed(owner.session_id, now=at(31))
    assert await lease_rows(db.url) == 1


async def test_a_deleted_sessions_sandbox_is_destroyed_again_to_be_erased(db: Db) -> None:
    """An ended lease of a deleted session is listed again, as deleted, so the
    sweeper's destroy erases what an earlier one saved; a destroy that acted on
    the old reason meanwhile is not taken for that one."""
    store = db.store
    destroyed, expired, active = [await new_owner(store) for _ in range(3)]
    for owner in (destroyed, expired, active):
        await acquire_session_sandbox(store, owner, T0, ttl=5 if owner is not active else TTL)
    await store.expire_sandbox_leases(now=at(10))
    assert await store.mark_sandbox_destroyed(
        destroyed.session_id, now=at(11), reason=LeaseExpiry.TTL
    )
    for owner in (destroyed, expired, active):
        await store.delete_session(owner.workspace_id, owner.session_id)
    listed = await store.leases_to_destroy()
    assert {lease.sandbox_id: lease.expiry_reason for lease in listed} == {
        destroyed.session_id: LeaseExpiry.SESSION_DELETED,
        expired.session_id: LeaseExpiry.SESSION_DELETED,
    }
    assert all(lease.destroyed_at is None for lease in listed)
    # The sweeper that destroyed ``expired`` for its TTL, keeping a snapshot:
    assert not await store.mark_sandbox_destroyed(
        expired.session_id, now=at(12), reason=LeaseExpiry.TTL
    )
    [ended] = await store.expire_sandbox_leases(now=at(13))
    assert ended.sandbox_id == active.session_id
    assert ended.expiry_reason == LeaseExpiry.SESSION_DELETED
    for owner in (destroyed, expired, active):
        assert await store.mark_sandbox_destroyed(
            owner.session_id, now=at(14), reason=LeaseExpiry.SESSION_DELETED
        )
    assert await store.leases_to_destroy() == []


async def test_destroy_bookkeeping(db: Db) -> None:
    store = db.store
    first, second, live = [await new_owner(store) for _ in range(3)]
    await acquire_session_sandbox(store, first, T0, ttl=5)
    await acquire_session_sandbox(store, second, T0, ttl=1000)
    await acquire_session_sandbox(store, live, T0, ttl=1000)
    await store.expire_sandbox_leases(now=at(10))
    await store.expire_sandbox_lease(second.session_id, reason=LeaseExpiry.EXPLICIT, now=at(20))
    listed = await store.leases_to_destroy()
    assert [lease.sandbox_id for lease in listed] == [first.session_id, second.session_id]
    assert not await store.mark_sandbox_destroyed(live.session_id, now=at(21))
    assert await store.mark_sandbox_destroyed(first.session_id, now=at(21))
    assert not await store.mark_sandbox_destroyed(first.session_id, now=at(22))
    assert [lease.sandbox_id for lease in await store.leases_to_destroy()] == [second.session_id]
    assert await store.mark_sandbox_destroyed(second.session_id, now=at(23))
    assert await store.leases_to_destroy() == []
    assert not await store.mark_sandbox_destroyed("no-such-sandbox", now=at(24))
    gone = await store.sandbox_lease(second.session_id)
    assert gone is not None
    assert (gone.status, gone.expiry_reason) == (SandboxLeaseStatus.DESTROYED, LeaseExpiry.EXPLICIT)
    assert (gone.expired_at, gone.destroyed_at) == (at(20), at(23))
    held = await store.sandbox_lease(live.session_id)
    assert held is not None and held.status == SandboxLeaseStatus.ACTIVE
    assert await store.sandbox_lease("no-such-sandbox") is None


async def test_active_seconds_accumulate(db: Db) -> None:
    owner = await new_owner(db.store)
    sandbox_id = owner.session_id
    assert await db.store.sandbox_active_seconds(sandbox_id) == 0.0

    async def add(seconds: float) -> None:
        await db.store.add_sandbox_active_seconds(
            sandbox_id,
            session_id=owner.session_id,
            workspace_id=owner.workspace_id,
            seconds=seconds,
            now=T0,
        )

    await add(1.5)
    await add(2.25)
    async with anyio.create_task_group() as group:
        for _ in range(40):
            group.start_soon(add, 0.5)
    assert await db.store.sandbox_active_seconds(sandbox_id) == 23.75
    with pytest.raises(ValueError):
        await add(-1.0)
    assert await db.store.sandbox_active_seconds(sandbox_id) == 23.75


async def test_acquire_rejects_another_workspace_and_a_bad_ttl(db: Db) -> None:
    owner = await new_owner(db.store)
    other = await new_owner(db.store)
    await acquire_session_sandbox(db.store, owner, T0)
    with pytest.raises(Conflict):
        await db.store.acquire_sandbox_lease(
            owner.session_id,
            workspace_id=other.workspace_id,
            session_id=None,
            environment_id=other.environment_id,
            agent_id=None,
            ttl_seconds=TTL,
            now=at(1),
        )
    with pytest.raises(ValueError):
        await acquire_session_sandbox(db.store, owner, at(1), ttl=0)


async def test_acquire_defaults_to_the_store_clock(db: Db) -> None:
    store = db.store
    owner = await new_owner(store)
    before = datetime.now(UTC)
    lease = await store.acquire_sandbox_lease(
        owner.session_id,
        workspace_id=owner.workspace_id,
        session_id=owner.session_id,
        environment_id=owner.environment_id,
        agent_id=owner.agent_id,
        ttl_seconds=TTL,
    )
    assert lease.created_at >= before
    assert lease.expires_at == lease.created_at + timedelta(seconds=TTL)


@pytest.mark.sql
async def test_upgrade_from_0002_keeps_data_and_adds_the_lease_tables(database_url: str) -> None:
    url = database_url

    def make_0002_database() -> None:
        engine = engine_of(url)
        try:
            config = alembic_config()
            with engine.begin() as conn:
                config.attributes["connection"] = conn
                command.upgrade(config, "0002")
                assert "sandbox_leases" not in inspect(conn).get_table_names()
                conn.execute(insert(workspaces).values(id="wrkspc_old", name="old", created_at=T0))
        finally:
            engine.dispose()

    await anyio.to_thread.run_sync(make_0002_database)
    store = await open_store(url)
    try:
        assert [w.id for w in await store.list_workspaces()] == ["wrkspc_old"]
        owner = await new_owner(store)
        await acquire_session_sandbox(store, owner, T0)
        await store.add_sandbox_active_seconds(
            owner.session_id,
            session_id=owner.session_id,
            workspace_id=owner.workspace_id,
            seconds=2.0,
            now=T0,
        )
        assert await store.sandbox_active_seconds(owner.session_id) == 2.0
    finally:
        await store.close()

    version = select(text("version_num")).select_from(text("alembic_version"))
    assert await read_one(url, version) == migrate.HEAD


async def test_each_condition_ends_a_lease_for_good_through_the_store(db: Db) -> None:
    """The conditions of ``test_every_condition_expires_its_lease_with_its_reason``,
    brought about through the store's own methods (so the fake runs it too)."""
    store = db.store
    live, idle, ended, deleted, archived = [await new_owner(store) for _ in range(5)]
    for owner in (live, ended, deleted):
        await acquire_session_sandbox(store, owner, T0, ttl=1000)
    await acquire_session_sandbox(store, idle, T0, ttl=5)
    await acquire_shared_sandbox(store, archived, T0)
    await store.terminate_session(ended.workspace_id, ended.session_id, [])
    await store.delete_session(deleted.workspace_id, deleted.session_id)
    await store.archive_environment(archived.workspace_id, archived.environment_id)
    expired = await store.expire_sandbox_leases(now=at(10))
    assert {lease.sandbox_id: lease.expiry_reason for lease in expired} == {
        idle.session_id: LeaseExpiry.TTL,
        ended.session_id: LeaseExpiry.SESSION_TERMINATED,
        deleted.session_id: LeaseExpiry.SESSION_DELETED,
        shared_id(archived): LeaseExpiry.ENVIRONMENT_ARCHIVED,
    }
    held = await store.sandbox_lease(live.session_id)
    assert held is not None and held.status == SandboxLeaseStatus.ACTIVE
    for owner in (ended, deleted):
        with pytest.raises(SandboxLeaseEnded):
            await acquire_session_sandbox(store, owner, at(11))
    await acquire_session_sandbox(store, idle, at(11))  # a TTL end is replaced
    assert (await store.expire_sandbox_leases(now=at(12))) == []
