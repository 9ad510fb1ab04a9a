"""Row locks on PostgreSQL (``_locks.py``): a session's lock, taken once per
transaction, is taken again by the next transaction on the same connection; a
write that waited for the lock decides on what its holder committed; a key
rotation's move of the kept key waits for a write of a secret sealed under the
old one, and re-seals it (``_kept_key.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TypeVar

import anyio
import psycopg
import pytest
from sqlalchemy import Connection, text
from sqlalchemy.exc import OperationalError

from stead.store import (
    Conflict,
    LeaseExpiry,
    NewEvent,
    PageRequest,
    SqlStore,
    StaleSecretKey,
    _locks,
    _vaults,
    _work,
)
from stead.vault import KEPT_KEY, SecretBox
from stead.vault.cipher import KEY_BYTES
from tests.databases import engine
from tests.unit.conftest import leased_session, new_session

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize(
        "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
    ),
]
TRY_LOCK = "SELECT id FROM sessions WHERE id = :id FOR UPDATE NOWAIT"
ACCEPT_ALL = lambda _session, _lookup: None  # noqa: E731
WAIT_S = 10.0
T = TypeVar("T")
R = TypeVar("R")


async def test_each_transaction_takes_the_sessions_lock_again(
    store: SqlStore, database_url: str
) -> None:
    _, session_id = await new_session(store)
    holder, other = engine(database_url), engine(database_url)
    try:
        with holder.connect() as conn, other.connect() as rival:
            for _ in range(2):
                with conn.begin():
                    _locks.session(conn, session_id)
                    _locks.session(conn, session_id)  # held already: nothing sent
                    with pytest.raises(OperationalError) as refused, rival.begin():
                        rival.execute(text(TRY_LOCK), {"id": session_id})
                    assert isinstance(refused.value.orig, psycopg.errors.LockNotAvailable)
                with rival.begin():  # free once the holder committed
                    rival.execute(text(TRY_LOCK), {"id": session_id})
    finally:
        holder.dispose()
        other.dispose()


async def test_an_accept_that_waited_for_the_lock_sees_what_the_holder_committed(
    store: SqlStore, database_url: str
) -> None:
    workspace_id, session_id = await new_session(store)
    holder = engine(database_url)
    outcome: list[BaseException] = []

    async def interrupt() -> None:
        try:
            await store.accept_user_events(
                workspace_id, session_id, [NewEvent("sevt_x", "user.interrupt", {})], ACCEPT_ALL
            )
        except Conflict as exc:
            outcome.append(exc)

    try:
        with holder.connect() as conn:
            async with anyio.create_task_group() as group:
                with conn.begin():
                    archive = "UPDATE sessions SET archived_at = now() WHERE id = :id"
                    conn.execute(text(archive), {"id": session_id})
                    group.start_soon(interrupt)
                    await _until_one_waits_for_a_lock(conn)
    finally:
        holder.dispose()
    assert [str(e) for e in outcome] == [
        f"session {session_id} is archived; it accepts no new events"
    ]
    assert await store.last_seq(session_id) == 0


async def test_a_deletion_waits_for_an_expiry_being_committed_and_ends_the_lease_deleted(
    store: SqlStore, database_url: str
) -> None:
    """The sweeper's expiry read the session as there; the deletion must not
    take the lease for still active (and leave it ended for its TTL, its final
    snapshot kept): it waits, then lists it to be destroyed again, erased."""
    workspace_id, session_id = await leased_session(store, ttl=60)
    holder = engine(database_url)
    try:
        with holder.connect() as conn:
            async with anyio.create_task_group() as group:
                with conn.begin():
                    expire = (
                        "UPDATE sandbox_leases SET status = 'expired', expiry_reason = 'ttl',"
                        " expired_at = now() WHERE sandbox_id = :id"
                    )
                    conn.execute(text(expire), {"id": session_id})
                    group.start_soon(store.delete_session, workspace_id, session_id)
                    await _until_one_waits_for_a_lock(conn)
    finally:
        holder.dispose()
    [listed] = await store.leases_to_destroy()
    assert (listed.sandbox_id, listed.expiry_reason) == (session_id, LeaseExpiry.SESSION_DELETED)


async def test_a_rotation_waits_for_a_secret_being_stored_under_the_old_key(
    store: SqlStore, database_url: str
) -> None:
    """The write read the old key as the database's: the rotation's move of the
    kept key waits for its commit, and the re-seal after the move finds it; a
    write after the move is refused. Nothing stays sealed under the old key."""
    old, new = SecretBox(b"o" * KEY_BYTES), SecretBox(b"n" * KEY_BYTES, (b"o" * KEY_BYTES,))
    await store.replace_installation_value(KEPT_KEY, old.key_id)
    workspace_id = (await store.create_workspace("w")).id
    vault_id = (await store.create_vault(workspace_id, "v", {})).id
    auth = {"type": "static_bearer", "mcp_server_url": "https://m.example"}
    resealed: list[int] = []

    async def rotate() -> None:
        await store.replace_installation_value(KEPT_KEY, new.key_id)
        again = await store.reseal_credentials(lambda c: new.seal(c.id, new.open(c.id, c.sealed)))
        resealed.append(again)

    holder = engine(database_url)
    try:
        with holder.connect() as conn:
            async with anyio.create_task_group() as group:
                with conn.begin():
                    sealed = old.seal("cred_a", {"token": "t"})
                    now = datetime.now(UTC)
                    args = (workspace_id, vault_id, "cred_a", None, {}, auth, sealed)
                    _vaults.create_credential(conn, now, *args)
                    group.start_soon(rotate)
                    await _until_one_waits_for_a_lock(conn)
    finally:
        holder.dispose()
    assert resealed == [1]
    stored = await store.get_credential(workspace_id, vault_id, "cred_a")
    assert new.sealed_by_current_key(stored.sealed)
    with pytest.raises(StaleSecretKey):
        sealed = old.seal("cred_b", {"token": "t"})
        other = {**auth, "mcp_server_url": "https://n.example"}
        await store.create_credential(workspace_id, vault_id, "cred_b", None, {}, other, sealed)


async def _until_one_waits_for_a_lock(conn: Connection) -> None:
    waiting = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    with anyio.fail_after(WAIT_S):
        while True:
            # Inside a transaction PostgreSQL answers pg_stat_activity from the
            # snapshot its first read took: cleared, each poll sees the present.
            conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            if conn.execute(text(waiting)).scalar_one() > 0:
                return
            await anyio.sleep(0.01)


async def _self_hosted(store: SqlStore, workspace_id: str) -> str:
    config = {"type": "self_hosted"}
    return (await store.create_environment(workspace_id, "h", None, config, {}, None)).id


async def _until_done_or_waiting(conn: Connection, done: anyio.Event) -> None:
    """Until ``done`` is set, or a transaction waits for a lock."""
    with anyio.fail_after(WAIT_S):
        while not done.is_set():
            with anyio.move_on_after(0.01):
                await done.wait()
            conn.execute(text("SELECT pg_stat_clear_snapshot()"))
            waiting = (
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if conn.execute(text(waiting)).scalar_one() > 0:
                return


async def _while_held(
    database_url: str, held: Callable[[Connection], T], call: Callable[[], Awaitable[R]]
) -> tuple[T, list[R]]:
    """``held(conn)`` in a transaction of another process (a connection of its
    own), kept open while the store runs ``call`` until it returns or waits for
    a lock; then what each gave (``call``'s, when it returned before the commit)."""
    holder = engine(database_url)
    done = anyio.Event()
    given: list[R] = []

    async def run() -> None:
        try:
            given.append(await call())
        finally:
            done.set()

    try:
        with holder.connect() as conn:
            async with anyio.create_task_group() as group:
                with conn.begin():
                    mine = held(conn)
                    group.start_soon(run)
                    await _until_done_or_waiting(conn, done)
    finally:
        holder.dispose()
    return mine, given


async def test_two_processes_queueing_a_sessions_work_at_once_queue_one_item(
    store: SqlStore, database_url: str
) -> None:
    """A turn queues its session's item while another process, whose worker
    stopped the last one, queues one too: one live item, not two (two workers
    would each run the session's calls)."""
    workspace_id, session_id = await new_session(store)
    env_id = await _self_hosted(store, workspace_id)
    mine, items = await _while_held(
        database_url,
        lambda conn: _work.ensure_work_item(
            conn, datetime.now(UTC), workspace_id, env_id, session_id, 60.0
        ),
        lambda: store.ensure_work_item(workspace_id, env_id, session_id, 60.0),
    )
    page = await store.list_work(workspace_id, env_id, PageRequest(limit=10, order="asc"))
    assert mine is not None and [i.id for i in page.items] == [mine.id]
    assert [i.id for i in items if i is not None] == [mine.id]


async def test_a_poll_passes_over_an_item_another_poll_is_claiming(
    store: SqlStore, database_url: str
) -> None:
    """Two workers polling two processes at once, two items queued: each gets
    one, where the second waited for the first's claim and was refused (409)."""
    workspace_id, _ = await new_session(store)
    env_id = await _self_hosted(store, workspace_id)
    first = await store.ensure_work_item(workspace_id, env_id, "sesn_first", 60.0)
    second = await store.ensure_work_item(workspace_id, env_id, "sesn_second", 60.0)
    mine, polled = await _while_held(
        database_url,
        lambda conn: _work.poll_work(
            conn, datetime.now(UTC), workspace_id, env_id, "worker-1", 5.0
        ),
        lambda: store.poll_work(workspace_id, env_id, "worker-2", 5.0),
    )
    assert first is not None and second is not None and mine is not None
    assert mine.item.id == first.id
    assert [c.item.id for c in polled if c is not None] == [second.id]
