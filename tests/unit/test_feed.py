"""A reader's feed: backlog then live, no gap and no duplicate, under lag and
reordering (on the in-memory store: the feed reads only the event log)."""

from __future__ import annotations

import anyio
import pytest

from stead.runtime import LocalBus, SessionFeed
from stead.store import EventRecord
from stead.store.inmemory import InMemoryStore
from tests.unit.conftest import collect_feed, new_session, user_message

pytestmark = pytest.mark.anyio


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


async def test_backlog_then_live_without_duplicates(store: InMemoryStore) -> None:
    _, session_id = await new_session(store)
    bus = LocalBus(capacity=100)
    early = await store.append_events(session_id, [user_message(f"sevt_{i}") for i in range(5)])
    with bus.subscribe(session_id) as subscription:
        feed = SessionFeed(store, subscription, session_id, last_seq=2)
        late = await store.append_events(session_id, [user_message("sevt_x")])
        bus.publish(session_id, early + late)  # a republish of old events must not repeat
        got = await collect_feed(feed, 4)
    assert [e.id for e in got] == ["sevt_2", "sevt_3", "sevt_4", "sevt_x"]


async def test_a_gap_in_live_notices_is_filled_from_the_store(store: InMemoryStore) -> None:
    _, session_id = await new_session(store)
    bus = LocalBus(capacity=100)
    with bus.subscribe(session_id) as subscription:
        feed = SessionFeed(store, subscription, session_id, last_seq=0)
        first = await store.append_events(session_id, [user_message("sevt_a")])
        second = await store.append_events(session_id, [user_message("sevt_b")])
        bus.publish(session_id, second)  # published out of commit order
        bus.publish(session_id, first)
        got = await collect_feed(feed, 2)
    assert [e.id for e in got] == ["sevt_a", "sevt_b"]


async def test_a_lagging_reader_rereads_instead_of_growing(store: InMemoryStore) -> None:
    _, session_id = await new_session(store)
    bus = LocalBus(capacity=8)
    with bus.subscribe(session_id) as subscription:
        feed = SessionFeed(store, subscription, session_id, last_seq=0)
        for i in range(50):
            bus.publish(session_id, await store.append_events(session_id, [user_message(f"e{i}")]))
        got = await collect_feed(feed, 50)
    assert [e.id for e in got] == [f"e{i}" for i in range(50)]
    assert bus.reader_count(session_id) == 0


async def test_pending_echoes_and_the_final_notice_pass_through(store: InMemoryStore) -> None:
    _, session_id = await new_session(store)
    bus = LocalBus(capacity=8)
    with bus.subscribe(session_id) as subscription:
        feed = SessionFeed(store, subscription, session_id, last_seq=0)
        await collect_feed(feed, 0)
        echo = EventRecord(session_id, "sevt_q", "user.message", {}, None, position=1)
        gone = EventRecord(session_id, "sevt_d", "session.deleted", {}, None)
        bus.publish(session_id, [echo])
        bus.publish_final(session_id, gone)
        with anyio.fail_after(5):
            items = await feed.next_batch()
            while len(items) < 2:
                items += await feed.next_batch()
    assert [(i.event.id, i.final) for i in items] == [("sevt_q", False), ("sevt_d", True)]
