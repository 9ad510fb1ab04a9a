"""Session events: send, list (filters, order, paging), the SDK stream, the pending queue."""

from __future__ import annotations

import threading

import anthropic
import anyio
import httpx2

from stead.store import RunStatus, open_store
from stead.testing import ServerProcess
from tests.integration.helpers import message, new_session, sse_frames


def test_send_echoes_with_ids_and_list_returns_them(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    sent = client.beta.sessions.events.send(session_id, events=[message("a"), message("b")])
    assert [e.type for e in sent.data] == ["user.message", "user.message"]
    ids = [e.id for e in sent.data]
    assert all(i.startswith("sevt_") for i in ids) and len(set(ids)) == 2
    listed = list(client.beta.sessions.events.list(session_id))
    assert [e.id for e in listed] == ids
    assert all(e.processed_at is not None for e in listed)
    interrupt = client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    assert interrupt.data[0].type == "user.interrupt"
    only = client.beta.sessions.events.list(session_id, types=["user.interrupt"])
    assert [e.id for e in only] == [interrupt.data[0].id]
    newest = client.beta.sessions.events.list(session_id, order="desc", limit=1)
    assert [e.id for e in newest.data] == [interrupt.data[0].id]


def test_list_pages_in_order_without_repeats(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    ids = [
        e.id
        for e in client.beta.sessions.events.send(
            session_id, events=[message(str(i)) for i in range(25)]
        ).data
    ]
    assert [e.id for e in client.beta.sessions.events.list(session_id, limit=4)] == ids
    desc = [e.id for e in client.beta.sessions.events.list(session_id, limit=7, order="desc")]
    assert desc == list(reversed(ids))


def test_sdk_stream_sees_events_sent_after_it_opened(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    client.beta.sessions.events.send(session_id, events=[message("before")])
    with client.beta.sessions.events.stream(session_id) as stream:
        sent = client.beta.sessions.events.send(session_id, events=[message("x"), message("y")])
        seen = []
        for event in stream:
            seen.append(event)
            if len(seen) == 2:
                break
    assert [e.id for e in seen] == [e.id for e in sent.data]
    assert [e.content[0].text for e in seen] == ["x", "y"]


def test_many_readers_each_get_every_event(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    streams = [client.beta.sessions.events.stream(session_id) for _ in range(5)]
    try:
        sent = client.beta.sessions.events.send(
            session_id, events=[message(str(i)) for i in range(10)]
        )
        want = [e.id for e in sent.data]
        for stream in streams:
            got = []
            for event in stream:
                got.append(event.id)
                if len(got) == len(want):
                    break
            assert got == want
    finally:
        for stream in streams:
            stream.close()


def test_deleting_a_session_ends_its_streams(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    with client.beta.sessions.events.stream(session_id) as stream:
        client.beta.sessions.delete(session_id)
        kinds = [event.type for event in stream]
    assert kinds == ["session.deleted"]


def test_events_sent_during_a_run_wait_in_the_pending_queue(
    server: ServerProcess, api_key: str, client: anthropic.Anthropic
) -> None:
    """A live run (the agent loop's row) makes user messages queue with processed_at null;
    draining moves them into the log in order, keeping their ids."""
    session_id = new_session(client)
    url = f"sqlite:///{server.data_dir / 'stead.db'}"

    async def start_run() -> str:
        store = await open_store(url)
        try:
            return await store.start_run(session_id)
        finally:
            await store.close()

    run_id = anyio.run(start_run)
    assert client.beta.sessions.retrieve(session_id).status == "running"
    frames: list[dict[str, object]] = []
    opened = threading.Event()

    def read() -> None:
        headers = {"x-api-key": api_key}
        stream_url = f"{server.url}/v1/sessions/{session_id}/events/stream"
        with httpx2.stream("GET", stream_url, headers=headers, timeout=30) as response:
            opened.set()
            for frame in sse_frames(response):
                frames.append(frame)
                if len(frames) == 2:
                    return

    reader = threading.Thread(target=read)
    reader.start()
    assert opened.wait(10)
    sent = client.beta.sessions.events.send(session_id, events=[message("q1"), message("q2")])
    assert [e.processed_at for e in sent.data] == [None, None]
    listed = list(client.beta.sessions.events.list(session_id))
    assert [(e.id, e.processed_at) for e in listed] == [(e.id, None) for e in sent.data]

    async def drain() -> list[str]:
        store = await open_store(url)
        try:
            drained = await store.drain_pending(session_id)
            await store.finish_run(run_id, RunStatus.DONE)
            return [e.id for e in drained]
        finally:
            await store.close()

    assert anyio.run(drain) == [e.id for e in sent.data]
    after = list(client.beta.sessions.events.list(session_id))
    assert [e.id for e in after] == [e.id for e in sent.data]
    assert all(e.processed_at is not None for e in after)
    assert client.beta.sessions.retrieve(session_id).status == "idle"
    # Queued echoes reach live readers without an SSE id: they are not in the log yet.
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert [f["data"]["id"] for f in frames] == [e.id for e in sent.data]  # type: ignore[index]
    assert all("id" not in f for f in frames)
    assert all(f["data"]["processed_at"] is None for f in frames)  # type: ignore[index]
