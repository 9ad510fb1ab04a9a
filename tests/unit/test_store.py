"""The SQL store on a real SQLite file and a real PostgreSQL database: the log, the
pending queue, paging, status, and what concurrent writers may not break."""

from __future__ import annotations

import anyio
import pytest

from stead.store import (
    Conflict,
    EventFilter,
    NewEvent,
    NotFound,
    PageRequest,
    RunStatus,
    SessionFilter,
    SqlStore,
)
from tests.databases import BACKENDS
from tests.unit.conftest import definition, new_session, user_message

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", BACKENDS, indirect=True)]
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
