"""Session events: send, list (filters, order, paging), the SDK stream, the pending queue."""

from __future__ import annotations

import base64

import anthropic
import pytest

from tests.images import png
from tests.integration.helpers import message, new_session, wait_idle
from tests.integration.on_each_store import ON_EACH_STORE, client

pytestmark = ON_EACH_STORE
__all__ = ["client"]  # fixtures


def test_send_echoes_with_ids_and_list_returns_them(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    sent = client.beta.sessions.events.send(session_id, events=[message("a"), message("b")])
    assert [e.type for e in sent.data] == ["user.message", "user.message"]
    ids = [e.id for e in sent.data]
    assert all(i.startswith("sevt_") for i in ids) and len(set(ids)) == 2
    listed = list(client.beta.sessions.events.list(session_id, types=["user.message"]))
    assert [e.id for e in listed] == ids
    assert all(e.processed_at is not None for e in listed)
    interrupt = client.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    assert interrupt.data[0].type == "user.interrupt"
    only = client.beta.sessions.events.list(session_id, types=["user.interrupt"])
    assert [e.id for e in only] == [interrupt.data[0].id]
    newest = client.beta.sessions.events.list(
        session_id, order="desc", limit=1, types=["user.message", "user.interrupt"]
    )
    assert [e.id for e in newest.data] == [interrupt.data[0].id]


def test_list_pages_in_order_without_repeats(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    ids = [
        e.id
        for e in client.beta.sessions.events.send(
            session_id, events=[message(str(i)) for i in range(25)]
        ).data
    ]
    mine = ["user.message"]
    assert [e.id for e in client.beta.sessions.events.list(session_id, limit=4, types=mine)] == ids
    listed = client.beta.sessions.events.list(session_id, limit=7, order="desc", types=mine)
    assert [e.id for e in listed] == list(reversed(ids))


def test_sdk_stream_sees_events_sent_after_it_opened(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    client.beta.sessions.events.send(session_id, events=[message("before")])
    with client.beta.sessions.events.stream(session_id) as stream:
        sent = client.beta.sessions.events.send(session_id, events=[message("x"), message("y")])
        seen = []
        for event in stream:
            if event.type == "user.message":
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
                if event.type == "user.message":
                    got.append(event.id)
                if len(got) == len(want):
                    break
            assert got == want
    finally:
        for stream in streams:
            stream.close()


def test_deleting_a_session_ends_its_streams(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    wait_idle(client, session_id)
    with client.beta.sessions.events.stream(session_id) as stream:
        client.beta.sessions.delete(session_id)
        kinds = [event.type for event in stream]
    assert kinds == ["session.deleted"]


def test_an_answer_to_an_unknown_tool_use_is_refused_without_echoing_its_id_whole(
    client: anthropic.Anthropic,
) -> None:
    """Before, the 400's message held the whole id a client sent: a megabyte back."""
    session_id = new_session(client)
    long_id = "sevt_" + "x" * 100_000
    answers = [
        {"type": "user.tool_confirmation", "tool_use_id": long_id, "result": "allow"},
        {"type": "user.custom_tool_result", "custom_tool_use_id": long_id},
    ]
    for answer in answers:
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.beta.sessions.events.send(session_id, events=[answer])  # type: ignore[list-item]
        text = str(refused.value.body["error"]["message"])  # type: ignore[index]
        assert "no agent." in text and "'sevt_xxx" in text and len(text) < 300


def test_a_message_of_only_redacted_blocks_is_refused(client: anthropic.Anthropic) -> None:
    """A redacted block is a placeholder the model is not shown: a message of
    nothing else was accepted, then failed its turn (the model was sent no
    message) or, later in a session, had the model go on with its own answer."""
    session_id = new_session(client)
    redacted = {"type": "user.message", "content": [{"type": "redacted"}]}
    with pytest.raises(anthropic.BadRequestError, match=r"events\.0\.content: holds only redacted"):
        client.beta.sessions.events.send(session_id, events=[redacted])
    agent = client.beta.sessions.retrieve(session_id).agent.id
    env = client.beta.sessions.retrieve(session_id).environment_id
    with pytest.raises(anthropic.BadRequestError, match=r"initial_events\.0\.content"):
        client.beta.sessions.create(agent=agent, environment_id=env, initial_events=[redacted])
    assert list(client.beta.sessions.events.list(session_id)) == []
    mixed = {"type": "user.message", "content": [{"type": "redacted"}, *message("hi")["content"]]}
    sent = client.beta.sessions.events.send(session_id, events=[mixed])
    assert [b.type for b in sent.data[0].content] == ["redacted", "text"]
    wait_idle(client, session_id)


def test_an_image_larger_than_the_model_takes_is_refused(client: anthropic.Anthropic) -> None:
    """The Messages API refuses a request holding an image over 8000 pixels on a
    side, and every later request of the session would hold it: it was accepted,
    then failed that turn and each one after."""
    session_id = new_session(client)

    def image(width: int, height: int) -> dict[str, object]:
        source = {
            "type": "base64",
            "media_type": "image/png",
            "data": base64.b64encode(png(width, height)).decode(),
        }
        return {"type": "image", "source": source}

    big = {"type": "user.message", "content": [*message("look")["content"], image(8001, 20)]}
    with pytest.raises(
        anthropic.BadRequestError, match=r"events\.0\.content\.1\.source\.data: .*8001x20 pixels"
    ):
        client.beta.sessions.events.send(session_id, events=[big])  # type: ignore[list-item]
    agent = client.beta.sessions.retrieve(session_id).agent.id
    env = client.beta.sessions.retrieve(session_id).environment_id
    with pytest.raises(anthropic.BadRequestError, match=r"initial_events\.0\.content\.1"):
        client.beta.sessions.create(agent=agent, environment_id=env, initial_events=[big])  # type: ignore[list-item]
    assert list(client.beta.sessions.events.list(session_id)) == []
    fits = {"type": "user.message", "content": [*message("look")["content"], image(8000, 20)]}
    sent = client.beta.sessions.events.send(session_id, events=[fits])  # type: ignore[list-item]
    assert [b.type for b in sent.data[0].content] == ["text", "image"]
