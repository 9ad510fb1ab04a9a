"""The SQL store on a real SQLite file and a real PostgreSQL database: the log, the
pending queue, paging, status, and what concurrent writers may not break."""

from __future__ import annotations

import anyio
import pytest

from stead.store import (
    ClaimTerms,
    Conflict,
    EventFilter,
    NewEvent,
    NotFound,
    PageRequest,
    RunStatus,
    SessionFilter,
    SqlStore,
    event_cursor_keys,
    open_store,
)
from tests.databases import STORES
from tests.unit.conftest import definition, new_session, user_message

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
ACCEPT_ALL = lambda _session, _lookup: None  # noqa: E731


async def test_concurrent_appends_get_gapless_increasing_seq(store: SqlStore) -> None:
    _, session_id = await new_session(store)

    async def writer(worker: int) -> None:
        for i in range(20):
            await store.append_events(session_id, [user_message(f"sevt_{worker}_{i}")])

    async with anyio.create_task_group() as group:
        for worker in range(10):
            group.start_soon(writer, worker)
    events = await store.events_after(session_id, 0, 1000)
    assert [e.seq for e in events] == list(range(1, 201))
    stamps = [e.processed_at for e in events]
    assert stamps == sorted(stamps)
    assert await store.last_seq(session_id) == 200


async def test_idle_sessions_log_user_events_and_busy_ones_queue_them(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    first = await store.accept_user_events(
        workspace_id, session_id, [user_message("sevt_a")], ACCEPT_ALL
    )
    assert [(e.id, e.seq) for e in first.logged] == [("sevt_a", 1)]
    run_id = await store.start_run(session_id)
    assert (await store.get_session(workspace_id, session_id)).status == "running"
    busy = await store.accept_user_events(
        workspace_id,
        session_id,
        [user_message("sevt_b"), NewEvent("sevt_i", "user.interrupt", {}), user_message("sevt_c")],
        ACCEPT_ALL,
    )
    assert [(e.id, e.seq, e.processed_at is None) for e in busy.echoes] == [
        ("sevt_b", None, True),
        ("sevt_i", 2, False),
        ("sevt_c", None, True),
    ]
    page = await store.list_events(
        workspace_id, session_id, PageRequest(limit=100, order="asc"), EventFilter()
    )
    assert [e.id for e in page.items] == ["sevt_a", "sevt_i", "sevt_b", "sevt_c"]
    desc = await store.list_events(
        workspace_id, session_id, PageRequest(limit=100, order="desc"), EventFilter()
    )
    assert [e.id for e in desc.items] == ["sevt_c", "sevt_b", "sevt_i", "sevt_a"]
    drained = await store.drain_pending(session_id)
    assert [(e.id, e.seq) for e in drained] == [("sevt_b", 3), ("sevt_c", 4)]
    assert await store.drain_pending(session_id) == []
    await store.finish_run(run_id, RunStatus.DONE)
    assert (await store.get_session(workspace_id, session_id)).status == "idle"


async def test_event_pages_cross_from_log_to_queue(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    await store.append_events(session_id, [user_message(f"sevt_l{i}") for i in range(4)])
    await store.start_run(session_id)
    queued = [user_message(f"sevt_q{i}") for i in range(3)]
    await store.accept_user_events(workspace_id, session_id, queued, ACCEPT_ALL)
    for order in ("asc", "desc"):
        seen: list[str] = []
        request = PageRequest(limit=3, order=order)
        while True:
            page = await store.list_events(workspace_id, session_id, request, EventFilter())
            seen += [e.id for e in page.items]
            if not page.has_next:
                break
            last = page.items[-1]
            key = (0, last.seq) if last.seq is not None else (1, last.position)
            request = PageRequest(limit=3, order=order, after=key)
        expected = [f"sevt_l{i}" for i in range(4)] + [f"sevt_q{i}" for i in range(3)]
        assert seen == (expected if order == "asc" else expected[::-1])
    only_log = await store.list_events(
        workspace_id,
        session_id,
        PageRequest(limit=100, order="asc"),
        EventFilter(types=["user.message"], processed_gte=page.items[0].processed_at),
    )
    assert all(e.seq is not None for e in only_log.items)


async def test_a_cursor_into_the_queue_with_a_log_floor_lists_what_was_logged_since(
    store: SqlStore,
) -> None:
    """``(1, position, seq)``: the log past ``seq`` first (what was logged after
    the page that reached the queue), then the queue past ``position``."""
    workspace_id, session_id = await new_session(store)
    await store.append_events(session_id, [user_message(f"sevt_l{i}") for i in range(2)])
    await store.start_run(session_id)
    queued = [user_message(f"sevt_q{i}") for i in range(3)]
    await store.accept_user_events(workspace_id, session_id, queued, ACCEPT_ALL)
    page = await store.list_events(
        workspace_id, session_id, PageRequest(limit=3, order="asc"), EventFilter()
    )
    *logged, reached = page.items
    assert [e.id for e in page.items] == ["sevt_l0", "sevt_l1", "sevt_q0"] and page.has_next
    await store.append_events(session_id, [user_message("sevt_since")])
    assert reached.position is not None and logged[-1].seq is not None
    after = (1, reached.position, logged[-1].seq)
    rest = await store.list_events(
        workspace_id, session_id, PageRequest(limit=10, order="asc", after=after), EventFilter()
    )
    assert [e.id for e in rest.items] == ["sevt_since", "sevt_q1", "sevt_q2"]


async def test_a_cursor_in_the_log_with_a_queue_position_does_not_list_the_queue_again(
    store: SqlStore,
) -> None:
    """``(0, seq, position)``: a page that went back to the log after reaching
    the queue, filled by what was logged since, goes on past ``seq`` in the log
    and past ``position`` in the queue: what it listed queued is not listed
    again while it still waits (before, the queue was listed from its start)."""
    workspace_id, session_id = await new_session(store)
    await store.append_events(session_id, [user_message("sevt_l0")])
    await store.start_run(session_id)
    queued = [user_message(f"sevt_q{i}") for i in range(3)]
    await store.accept_user_events(workspace_id, session_id, queued, ACCEPT_ALL)
    first = await store.list_events(
        workspace_id, session_id, PageRequest(limit=2, order="asc"), EventFilter()
    )
    assert [e.id for e in first.items] == ["sevt_l0", "sevt_q0"]
    # The running turn logs while the queue waits.
    await store.append_events(session_id, [user_message(f"sevt_s{i}") for i in range(3)])
    rest: list[str] = []
    page = first
    request = PageRequest(limit=2, order="asc")
    while page.has_next:
        key = event_cursor_keys(request, page.items)(page.items[-1])
        request = PageRequest(limit=2, order="asc", after=key)
        page = await store.list_events(workspace_id, session_id, request, EventFilter())
        rest += [e.id for e in page.items]
    assert rest == ["sevt_s0", "sevt_s1", "sevt_s2", "sevt_q1", "sevt_q2"]


async def test_session_status_is_derived(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    where = SessionFilter(statuses=["idle"])
    page = PageRequest(limit=10, order="asc")
    assert [s.id for s in (await store.list_sessions(workspace_id, page, where)).items] == [
        session_id
    ]
    run_id = await store.start_run(session_id)
    await store.finish_run(run_id, RunStatus.RETRYING)
    assert (await store.get_session(workspace_id, session_id)).status == "rescheduling"
    with pytest.raises(Conflict):
        await store.archive_session(workspace_id, session_id)
    with pytest.raises(Conflict):
        await store.delete_session(workspace_id, session_id)
    rescheduling = SessionFilter(statuses=["rescheduling"])
    assert len((await store.list_sessions(workspace_id, page, rescheduling)).items) == 1


async def test_session_pages_walk_both_ways(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())
    env = await store.create_environment(workspace.id, "env", None, {}, {}, None)
    ids = []
    for _ in range(7):
        session, _ = await store.create_session(
            workspace.id, (agent.id, None), lambda a: {}, env.id, {}, []
        )
        ids.append(session.id)
    where = SessionFilter()
    first = await store.list_sessions(workspace.id, PageRequest(limit=3, order="asc"), where)
    assert [s.id for s in first.items] == ids[:3] and first.has_next and not first.has_prev
    last = first.items[-1]
    second = await store.list_sessions(
        workspace.id, PageRequest(3, "asc", after=(last.created_at, last.id)), where
    )
    assert [s.id for s in second.items] == ids[3:6] and second.has_prev
    head = second.items[0]
    back = await store.list_sessions(
        workspace.id, PageRequest(3, "asc", before=(head.created_at, head.id)), where
    )
    assert [s.id for s in back.items] == ids[:3] and not back.has_prev and back.has_next


async def test_agent_versions_and_workspace_scoping(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    other = await store.create_workspace("x")
    agent = await store.create_agent(workspace.id, definition())
    same = await store.update_agent(workspace.id, agent.id, None, lambda d: dict(d))
    assert same.version == 1
    two = await store.update_agent(workspace.id, agent.id, 1, lambda d: {**d, "name": "b"})
    assert two.version == 2
    with pytest.raises(Conflict):
        await store.update_agent(workspace.id, agent.id, 1, lambda d: {**d, "name": "c"})
    with pytest.raises(NotFound):
        await store.get_agent(other.id, agent.id)
    with pytest.raises(NotFound) as missing_version:
        await store.get_agent(workspace.id, agent.id, 9)
    assert missing_version.value.field == "version"


async def test_a_failed_change_writes_nothing(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())

    def broken(_: dict[str, object]) -> dict[str, object]:
        raise ValueError("bad change")

    with pytest.raises(ValueError):
        await store.update_agent(workspace.id, agent.id, None, broken)
    assert (await store.get_agent(workspace.id, agent.id)).version == 1


async def _stores_on(store: SqlStore, url: str, count: int) -> list[SqlStore]:
    """``store`` and ``count - 1`` more on its database: writers that contend as
    separate processes would (SQLite's write lock; PostgreSQL's row locks)."""
    return [store, *[await open_store(url) for _ in range(count - 1)]]


@pytest.mark.sql
async def test_writers_on_several_stores_keep_each_log_gapless_and_ordered(
    store: SqlStore, database_url: str
) -> None:
    _, session_id = await new_session(store)
    stores = await _stores_on(store, database_url, 3)

    async def writer(worker: int) -> None:
        for i in range(15):
            mine = stores[worker % len(stores)]
            await mine.append_events(session_id, [user_message(f"sevt_{worker}_{i}")])

    try:
        async with anyio.create_task_group() as group:
            for worker in range(6):
                group.start_soon(writer, worker)
    finally:
        for other in stores[1:]:
            await other.close()
    events = await store.events_after(session_id, 0, 1000)
    assert [e.seq for e in events] == list(range(1, 91))
    stamps = [e.processed_at for e in events]
    assert stamps == sorted(stamps)
    for worker in range(6):  # each writer's own events in the order it wrote them
        mine = [e.id for e in events if e.id.startswith(f"sevt_{worker}_")]
        assert mine == [f"sevt_{worker}_{i}" for i in range(15)]


@pytest.mark.sql
async def test_starts_at_once_leave_one_live_run_and_one_claim_wins(
    store: SqlStore, database_url: str
) -> None:
    _, session_id = await new_session(store)
    stores = await _stores_on(store, database_url, 3)
    started: list[str] = []
    claimed: list[object] = []

    async def start(i: int) -> None:
        started.append(await stores[i % len(stores)].start_run(session_id))

    async def claim(i: int) -> None:
        terms = ClaimTerms(owner=f"brain-{i}", lease_seconds=30.0, opening=lambda _a: [])
        taken = await stores[i % len(stores)].claim_next(session_id, terms)
        if taken is not None:
            claimed.append(taken.claim)

    try:
        async with anyio.create_task_group() as group:
            for i in range(9):
                group.start_soon(start, i)
        async with anyio.create_task_group() as group:
            for i in range(9):
                group.start_soon(claim, i)
    finally:
        for other in stores[1:]:
            await other.close()
    assert len(set(started)) == 1
    assert len(claimed) == 1
    assert await store.queued_runs(session_id) == []


@pytest.mark.sql
async def test_agent_updates_at_once_make_one_version_each(
    store: SqlStore, database_url: str
) -> None:
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())
    stores = await _stores_on(store, database_url, 3)

    async def rename(i: int) -> None:
        mine = stores[i % len(stores)]
        await mine.update_agent(workspace.id, agent.id, None, lambda d: {**d, "name": f"n{i}"})

    try:
        async with anyio.create_task_group() as group:
            for i in range(6):
                group.start_soon(rename, i)
    finally:
        for other in stores[1:]:
            await other.close()
    assert (await store.get_agent(workspace.id, agent.id)).version == 7


@pytest.mark.sql
async def test_a_nul_in_a_string_is_stored(store: SqlStore, database_url: str) -> None:
    """SQLite keeps U+0000; PostgreSQL's jsonb cannot, and gets U+FFFD in its place."""
    _, session_id = await new_session(store)
    text = "a\x00b \\u0000 c"
    await store.append_events(session_id, [user_message("sevt_nul", text)])
    [event] = await store.events_after(session_id, 0, 10)
    stored = event.body["content"][0]["text"]
    nul = "\x00" if database_url.startswith("sqlite") else "\ufffd"
    assert stored == f"a{nul}b \\u0000 c"
