"""A request larger than the model's API takes in bytes (the Messages API's
32 MB; 413 ``request_too_large``), through the SDK against a real server and
a fake model that refuses a body over 200 KB as the API does.

A session's images and PDFs weigh megabytes and count few tokens: a request
far under the window can pass the byte limit. Compacting cures that, as it
cures a request too long for the window: the summarising request shows no
media, and the part kept holds at most half the bytes of the refused request.
A request too large for other reasons ends its turn saying so.
"""

from __future__ import annotations

import json
import random
from base64 import b64encode
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.harness import SUMMARY_INSTRUCTION
from stead.testing import FakeModel, ServeForker, ServerProcess, Text, Turn, when_asked
from stead.testing.scripts import last_user_text
from tests.conftest import loop_env, sdk_of
from tests.integration.helpers import message, new_session, send_and_wait

MOST_BYTES = 200_000
SUMMARY = "SUMMARY: the user sent pictures."


def answer(body: dict[str, Any]) -> Turn:
    return Turn([Text(f"re {last_user_text(body)[:30]}")])


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    script = when_asked(SUMMARY_INSTRUCTION, Turn([Text(SUMMARY)]), answer)
    with FakeModel(script, max_request_bytes=MOST_BYTES) as started:
        yield started


@pytest.fixture(scope="module")
def client(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeModel, forker: ServeForker
) -> Iterator[anthropic.Anthropic]:
    server = ServerProcess(tmp_path_factory.mktemp("large"), env=loop_env(fake), forker=forker)
    server.start()
    try:
        with sdk_of(server) as sdk:
            yield sdk
    finally:
        server.stop()


def picture(seed: int) -> dict[str, Any]:
    """An image of 30 KB (40 KB in base64): 1,600 tokens, whatever its bytes."""
    data = b64encode(random.Random(seed).randbytes(30_000)).decode()
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def test_a_request_too_large_for_its_media_is_compacted_and_asked_again(
    client: anthropic.Anthropic, fake: FakeModel
) -> None:
    """Five messages with a picture each, some 8,000 tokens: the fifth
    request passes 200 KB. The turn ended with model_request_failed_error, and
    so did every later one (each carried the five pictures)."""
    session_id = new_session(client)
    for number in range(5):
        text = {"type": "text", "text": f"picture {number}"}
        send_and_wait(
            client, session_id, {"type": "user.message", "content": [text, picture(number)]}
        )
    send_and_wait(client, session_id, message("and now?"))
    events = list(client.beta.sessions.events.list(session_id))

    errors = [e.error for e in events if e.type == "session.error"]
    assert [(e.type, e.retry_status.type) for e in errors] == [
        ("model_request_failed_error", "retrying")
    ]
    assert "request_too_large" in errors[0].message and "compacting" in errors[0].message
    idles = [e.stop_reason.type for e in events if e.type == "session.status_idle"]
    assert idles == ["end_turn"] * 6
    answers = [e.content[0].text for e in events if e.type == "agent.message"]
    assert answers[-2:] == ["re picture 4", "re and now?"]
    assert len([e for e in events if e.type == "agent.thread_context_compacted"]) == 1
    bodies = [json.dumps(r.body) for r in fake.requests]
    [refused] = [body for body in bodies if len(body) > MOST_BYTES]
    [summarising] = [body for body in bodies if SUMMARY_INSTRUCTION in body]
    shown = picture(0)["source"]["data"]
    assert shown in refused and shown not in summarising
    assert "[image (image/png, 29 KB), in the user's message " in summarising
    # After the summary, at most half the refused request's bytes of pictures.
    after = bodies[bodies.index(summarising) + 1 :]
    assert after and all(len(body) <= len(refused) // 2 + 10_000 for body in after)


def test_a_request_too_large_for_its_text_ends_the_turn_saying_so(
    client: anthropic.Anthropic,
) -> None:
    """Some 60,000 tokens of text, far under the window: no image or PDF for
    compacting to leave out."""
    session_id = new_session(client)
    send_and_wait(client, session_id, message("long " + "x" * 240_000))
    events = list(client.beta.sessions.events.list(session_id))

    errors = [e.error for e in events if e.type == "session.error"]
    assert [(e.type, e.retry_status.type) for e in errors] == [
        ("model_request_failed_error", "exhausted")
    ]
    assert "request_too_large" in errors[0].message
    assert "not for its images or PDFs" in errors[0].message
    assert events[-1].type == "session.status_idle"
    assert events[-1].stop_reason.type == "retries_exhausted"
