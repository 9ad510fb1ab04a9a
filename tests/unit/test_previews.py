"""Stream previews: the tracker names events as the harness will log them, and the
bus hands previews only to readers that asked, never at the cost of an event."""

from __future__ import annotations

from typing import Any

import pytest

from stead.harness import response_events
from stead.harness.providers.anthropic_answer import AnswerBuilder
from stead.runtime import LocalBus, Preview, SessionFeed
from stead.runtime.previews import PreviewTracker
from stead.store import SqlStore
from tests.unit.conftest import collect_feed, new_session, user_message
from tests.unit.test_anthropic_answer import block, delta, start

Json = dict[str, Any]
AGENT: Json = {"tools": [], "mcp_servers": []}


def text(index: int, *parts: str) -> list[Json]:
    deltas = [{"type": "text_delta", "text": part} for part in parts]
    return block(index, {"type": "text", "text": "", "citations": None}, *deltas)


STREAM = [
    start({"input_tokens": 3, "output_tokens": 1}),
    *text(0, "Hel", "lo"),
    *text(1),
    *text(2, " world"),
    *block(3, {"type": "thinking", "thinking": "", "signature": ""}),
    *block(4, {"type": "redacted_thinking", "data": "b3BhcXVl"}),
    *text(5),
    *block(6, {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}),
    *text(7, "bye"),
    delta("end_turn", {"output_tokens": 9}),
    {"type": "message_stop"},
]


def test_previews_name_the_events_the_answer_is_logged_as() -> None:
    published: list[Preview] = []
    tracker = PreviewTracker(published.append)
    builder = AnswerBuilder(tracker)
    for raw in STREAM:
        builder.add(raw)
    logged = tracker.named(response_events(builder.content(), AGENT, []))

    assert [e.type for e in logged] == [
        "agent.message",
        "agent.thinking",
        "agent.thinking",
        "agent.tool_use",
        "agent.message",
    ]
    starts = [p.body["event"] for p in published if p.type == "event_start"]
    # In stream order, one per logged message or thinking event, under its id.
    assert starts == [{"type": e.type, "id": e.id} for e in logged if e.type != "agent.tool_use"]
    assert len({e.id for e in logged}) == len(logged)
    for event in (logged[0], logged[-1]):
        entries: dict[int, str] = {}
        for p in published:
            if p.type == "event_delta" and p.body["event_id"] == event.id:
                piece = p.body["delta"]
                entries[piece["index"]] = entries.get(piece["index"], "") + piece["content"]["text"]
        assert [entries[i] for i in sorted(entries)] == [b["text"] for b in event.body["content"]]
    assert [p.previewed for p in published if p.type == "event_delta"] == ["agent.message"] * 4


def test_a_retried_request_is_named_afresh() -> None:
    published: list[Preview] = []
    tracker = PreviewTracker(published.append)
    tracker.block_started(0, "text")
    tracker.text_added(0, "cut short")
    tracker.restart()
    tracker.block_started(0, "text")
    tracker.text_added(0, "whole")
    (event,) = tracker.named([("agent.message", {"content": [{"type": "text", "text": "whole"}]})])
    second_start = [p for p in published if p.type == "event_start"][1]
    assert second_start.body["event"]["id"] == event.id


def preview(kind: str = "agent.message", event_id: str = "sevt_p") -> Preview:
    return Preview(kind, "event_start", {"event": {"type": kind, "id": event_id}})


@pytest.mark.anyio
async def test_readers_get_previews_of_what_they_asked_for_in_order(store: SqlStore) -> None:
    _, session_id = await new_session(store)
    bus = LocalBus(capacity=100)
    with (
        bus.subscribe(session_id, frozenset({"agent.message"})) as wants,
        bus.subscribe(session_id) as plain,
    ):
        previewed = SessionFeed(store, wants, session_id, last_seq=0)
        unpreviewed = SessionFeed(store, plain, session_id, last_seq=0)
        first = await store.append_events(session_id, [user_message("sevt_1")])
        bus.publish(session_id, first)
        for feed in (previewed, unpreviewed):  # caught up from the store
            assert [e.id for e in await collect_feed(feed, 1)] == ["sevt_1"]
        bus.preview(session_id, preview("agent.thinking", "sevt_t"))
        bus.preview(session_id, preview())
        bus.publish(session_id, await store.append_events(session_id, [user_message("sevt_2")]))
        got = await collect_feed(previewed, 2)
        assert [
            (type(e).__name__, e.id if not isinstance(e, Preview) else e.body) for e in got
        ] == [
            ("Preview", {"event": {"type": "agent.message", "id": "sevt_p"}}),
            ("EventRecord", "sevt_2"),
        ]
        assert [e.id for e in await collect_feed(unpreviewed, 1)] == ["sevt_2"]


@pytest.mark.anyio
async def test_previews_give_way_to_events_and_never_make_a_reader_lag(store: SqlStore) -> None:
    _, session_id = await new_session(store)
    bus = LocalBus(capacity=3)
    with bus.subscribe(session_id, frozenset({"agent.message"})) as subscription:
        for i in range(5):
            bus.preview(session_id, preview(event_id=f"sevt_{i}"))
        notices, lagged = await subscription.take()
        assert len(notices) == 3 and not lagged  # the rest were dropped, not queued
        for i in range(3):
            bus.preview(session_id, preview(event_id=f"sevt_{i}"))
        logged = await store.append_events(session_id, [user_message("sevt_e")])
        bus.publish(session_id, logged)
        notices, lagged = await subscription.take()
        assert not lagged
        assert [type(n).__name__ for n in notices] == ["Notice"]
