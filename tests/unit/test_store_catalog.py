"""Workspaces and keys, and the paging of agents, their versions and environments,
on every backend (SQLite, PostgreSQL and the in-memory store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from stead.store import Conflict, NotFound, PageRequest, SqlStore
from tests.databases import STORES
from tests.unit.conftest import definition, new_session, user_message

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]


async def test_keys_authenticate_until_revoked_and_secrets_are_kept(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    key, secret = await store.create_api_key(workspace.id, "ci", admin=True)
    other, _ = await store.create_api_key(workspace.id, "laptop")
    assert secret.endswith(key.hint) and secret not in repr(key)
    assert await store.authenticate(secret) == key
    assert await store.authenticate(secret + "x") is None
    assert [k.id for k in await store.list_api_keys()] == [key.id, other.id]
    assert await store.count_api_keys() == 2
    revoked = await store.revoke_api_key(key.id)
    assert revoked.revoked_at is not None
    assert (await store.revoke_api_key(key.id)).revoked_at == revoked.revoked_at
    assert await store.authenticate(secret) is None
    with pytest.raises(NotFound):
        await store.revoke_api_key("apikey_missing")
    with pytest.raises(NotFound):
        await store.create_api_key("wrkspc_missing", "x")
    assert [w.id for w in await store.list_workspaces()] == [workspace.id]
    made = await store.installation_secret("test")  # made once, then the same
    assert len(made) == 32 and await store.installation_secret("test") == made
    assert await store.installation_secret("other") != made
    # A kept value is the first one kept, until it is replaced.
    assert await store.installation_value("kept", b"first") == b"first"
    assert await store.installation_value("kept", b"second") == b"first"
    await store.replace_installation_value("kept", b"third")
    assert await store.installation_value("kept", b"fourth") == b"third"
    await store.replace_installation_value("new", b"fifth")
    assert await store.installation_value("new", b"sixth") == b"fifth"


async def test_agents_and_environments_page_both_ways(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    agents = [await store.create_agent(workspace.id, definition(f"a{i}")) for i in range(5)]
    await store.archive_agent(workspace.id, agents[4].id)
    ids = [a.id for a in agents]
    first = await store.list_agents(workspace.id, PageRequest(2, "desc"), False, None, None)
    assert [a.id for a in first.items] == ids[3:1:-1] and first.has_next and not first.has_prev
    cursor = (first.items[-1].created_at, first.items[-1].id)
    rest = await store.list_agents(
        workspace.id, PageRequest(2, "desc", after=cursor), False, None, None
    )
    assert [a.id for a in rest.items] == ids[1::-1] and not rest.has_next and rest.has_prev
    back = (rest.items[0].created_at, rest.items[0].id)
    again = await store.list_agents(
        workspace.id, PageRequest(2, "desc", before=back), False, None, None
    )
    assert [a.id for a in again.items] == ids[3:1:-1] and not again.has_prev
    every = await store.list_agents(workspace.id, PageRequest(10, "asc"), True, None, None)
    assert [a.id for a in every.items] == ids

    for name in ("b", "c"):
        await store.update_agent(workspace.id, ids[0], None, lambda d, n=name: {**d, "name": n})
    page = PageRequest(2, "asc", after=(1,))
    versions = await store.list_agent_versions(workspace.id, ids[0], page)
    assert [v.version for v in versions.items] == [2, 3]
    assert versions.items[1].definition["name"] == "c"

    envs = [
        await store.create_environment(workspace.id, f"e{i}", None, {}, {}, None) for i in range(3)
    ]
    with pytest.raises(Conflict):
        await store.create_environment(workspace.id, "e0", None, {}, {}, None)
    head = (envs[1].created_at, envs[1].id)
    before = await store.list_environments(workspace.id, PageRequest(5, "asc", before=head), False)
    assert [e.id for e in before.items] == [envs[0].id] and before.has_next and not before.has_prev


async def test_an_environment_in_use_is_not_deleted(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    session = await store.get_session(workspace_id, session_id)
    with pytest.raises(Conflict):
        await store.delete_environment(workspace_id, session.environment_id)
    await store.archive_session(workspace_id, session_id)
    await store.delete_environment(workspace_id, session.environment_id)
    with pytest.raises(NotFound):
        await store.get_environment(workspace_id, session.environment_id)


async def test_appenders_and_readers_at_once_see_one_gapless_log(store: SqlStore) -> None:
    _, session_id = await new_session(store)
    seen: list[int] = []

    async def append(worker: int) -> None:
        for i in range(10):
            batch = [user_message(f"sevt_{worker}_{i}_{j}") for j in range(3)]
            await store.append_events(session_id, batch)

    async def read() -> None:
        while len(seen) < 120:
            seen.extend(e.seq or 0 for e in await store.events_after(session_id, len(seen), 7))
            await anyio.lowlevel.checkpoint()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(read)
            for worker in range(4):
                group.start_soon(append, worker)
    assert seen == list(range(1, 121))
    events = await store.events_after(session_id, 0, 1000)
    for worker in range(4):  # a batch stays together, and each writer's order is kept
        mine = [e for e in events if e.id.startswith(f"sevt_{worker}_")]
        wrote = [f"sevt_{worker}_{i}_{j}" for i in range(10) for j in range(3)]
        assert [e.id for e in mine] == wrote
        assert all(b.seq == a.seq + 1 for a, b in zip(mine[::3], mine[1::3], strict=True))
    assert await store.find_event_seq(session_id, "sevt_2_0_0") is not None
    assert await store.find_event_seq(session_id, "sevt_none") is None
    assert await store.last_seq(session_id) == 120


async def test_an_ended_console_login_is_kept_until_it_would_have_expired(
    store: SqlStore,
) -> None:
    now = datetime.now(UTC)
    await store.end_console_login("a" * 64, now + timedelta(hours=12))
    await store.end_console_login("a" * 64, now + timedelta(hours=12))  # again: no error
    await store.end_console_login("b" * 64, now - timedelta(seconds=1))
    assert await store.console_login_ended("a" * 64)
    assert await store.console_login_ended("b" * 64)
    assert not await store.console_login_ended("c" * 64)
    # Each logout drops those past their expiry: the table stays small.
    await store.end_console_login("c" * 64, now + timedelta(hours=12))
    assert not await store.console_login_ended("b" * 64)


async def test_starts_racing_on_an_empty_store_make_one_first_key(
    store: SqlStore,
) -> None:
    """Several ``stead serve`` starting at once on one new database: one makes
    the first workspace and key, the others none (before, each made its own
    workspace, and clients of different processes saw different data)."""
    made: list[object] = []

    async def start() -> None:
        made.append(await store.first_api_key("default", "first key"))

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(start)
    firsts = [m for m in made if m is not None]
    assert len(made) == 4 and len(firsts) == 1
    assert await store.count_api_keys() == 1 and len(await store.list_workspaces()) == 1
    assert await store.first_api_key("default", "first key") is None
