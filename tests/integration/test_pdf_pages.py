"""PDFs sent as bytes count by their pages, through the SDK against a real
server and the fake model: a session compacts before a request whose PDF
would not fit beside the conversation, and never sends one that cannot fit
at all. A PDF's pages cost the model some 1,500 to 3,000 tokens each; counted
as one image (1,600 tokens), a long PDF went out in a request far over the
model's window, which the model refused. Images and PDFs by URL count at
least as an image: counted as their URLs' characters, many went out with a
conversation that left no room for them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.harness import SUMMARY_INSTRUCTION
from stead.harness.windows import MEDIA_TOKENS, PDF_PAGE_TOKENS
from stead.testing import FakeModel, ServeForker, ServerProcess, Text, Turn, when_asked
from stead.testing.scripts import last_user_text
from tests.conftest import loop_env, sdk_of
from tests.integration.helpers import message, new_session, send_and_wait
from tests.pdfs import pdf_base64, pdf_message

MODEL = "claude-sonnet-4-6"
WINDOW = 20_000
"""Compacted past 16,000 tokens; a page counts 3,000."""
SUMMARY = "SUMMARY: long numbered messages."


def answer(body: dict[str, Any]) -> Turn:
    return Turn([Text(f"re {last_user_text(body)[:30]}")])


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(when_asked(SUMMARY_INSTRUCTION, Turn([Text(SUMMARY)]), answer)) as started:
        yield started


@pytest.fixture(scope="module")
def client(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeModel, forker: ServeForker
) -> Iterator[anthropic.Anthropic]:
    env = loop_env(fake, STEAD_CONTEXT_WINDOWS=json.dumps({MODEL: WINDOW}))
    server = ServerProcess(tmp_path_factory.mktemp("pdfs"), env=env, forker=forker).start()
    try:
        with sdk_of(server) as sdk:
            yield sdk
    finally:
        server.stop()


def carrying(fake: FakeModel, data: str) -> list[dict[str, Any]]:
    return [r.body for r in fake.requests if data in json.dumps(r.body)]


@pytest.mark.parametrize("object_streams", [False, True], ids=["table", "object-streams"])
def test_a_pdf_that_does_not_fit_beside_the_conversation_is_compacted_before_it_is_sent(
    client: anthropic.Anthropic, fake: FakeModel, object_streams: bool
) -> None:
    """Three messages of some 3,000 tokens, then a four-page PDF: 12,000 more.
    Counted as an image it seemed to fit, and went out with all of them."""
    session_id = new_session(client)
    for number in range(3):
        send_and_wait(client, session_id, message(f"message {number} " + "u" * 12_000))
    document = pdf_base64(4, object_streams=object_streams)
    send_and_wait(client, session_id, pdf_message("message 3, with a document", document))
    events = list(client.beta.sessions.events.list(session_id))

    assert [e.type for e in events if e.type == "session.error"] == []
    compacted = [e for e in events if e.type == "agent.thread_context_compacted"]
    assert len(compacted) == 1
    # The document's pages, and the three messages (9,000 tokens and more).
    assert (compacted[0].model_extra or {})["pre_compaction_tokens"] > 4 * PDF_PAGE_TOKENS + 9_000
    sent = [
        body for body in carrying(fake, document) if SUMMARY_INSTRUCTION not in json.dumps(body)
    ]
    assert len(sent) == 1 and "message 0" not in json.dumps(sent[0])
    assert SUMMARY in json.dumps(sent[0])
    idles = [e.stop_reason.type for e in events if e.type == "session.status_idle"]
    assert idles == ["end_turn"] * 4


def test_media_by_url_count_at_least_as_an_image_and_are_compacted_before_they_are_sent(
    client: anthropic.Anthropic, fake: FakeModel
) -> None:
    """Three messages of some 3,000 tokens, then three images and two PDFs by
    URL: 8,000 tokens at least (an image is up to 1,600, a PDF 3,000 a page).
    Counted as their URLs' characters (some 15 tokens each), they seemed to
    fit, and went out with all of the messages."""
    session_id = new_session(client)
    for number in range(3):
        send_and_wait(client, session_id, message(f"message {number} " + "u" * 12_000))
    images = [
        {"type": "image", "source": {"type": "url", "url": f"https://example.com/{n}.png"}}
        for n in range(3)
    ]
    documents = [
        {"type": "document", "source": {"type": "url", "url": f"https://example.com/{n}.pdf"}}
        for n in range(2)
    ]
    text = {"type": "text", "text": "message 3, with pictures"}
    send_and_wait(
        client, session_id, {"type": "user.message", "content": [text, *images, *documents]}
    )
    events = list(client.beta.sessions.events.list(session_id))

    assert [e.type for e in events if e.type == "session.error"] == []
    compacted = [e for e in events if e.type == "agent.thread_context_compacted"]
    assert len(compacted) == 1
    assert (compacted[0].model_extra or {})["pre_compaction_tokens"] > 5 * MEDIA_TOKENS + 9_000
    sent = [
        body
        for body in carrying(fake, "https://example.com/1.pdf")
        if SUMMARY_INSTRUCTION not in json.dumps(body)
    ]
    assert len(sent) == 1 and "message 0" not in json.dumps(sent[0])


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGMAAQAABQABpfZFQAAAAABJRU5ErkJggg=="
"""A one-pixel image: 1,600 tokens by the estimate, as any image."""


def with_images(text: str, count: int) -> dict[str, Any]:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    return {"type": "user.message", "content": [{"type": "text", "text": text}] + [image] * count}


def summarising(fake: FakeModel) -> list[str]:
    return [json.dumps(r.body) for r in fake.requests if SUMMARY_INSTRUCTION in json.dumps(r.body)]


@pytest.mark.parametrize("media", ["pdf", "images"])
def test_media_too_large_for_the_window_are_never_sent_and_the_session_goes_on(
    client: anthropic.Anthropic, fake: FakeModel, media: str
) -> None:
    """An eight-page PDF (24,000 tokens, in some 3 KB), or eleven images
    (17,600): the turn that brings it cannot send it. The summarising requests
    of the turns after it carried it whole, so every later turn ended at the
    compaction limit too; now it shows a note of what was there instead."""
    session_id = new_session(client)
    send_and_wait(client, session_id, message("hello"))
    document = pdf_base64(8)
    sent = pdf_message("too long", document) if media == "pdf" else with_images("too long", 11)
    send_and_wait(client, session_id, sent)
    events = list(client.beta.sessions.events.list(session_id))
    errors = [e.error for e in events if e.type == "session.error"]
    assert [e.type for e in errors] == ["compaction_limit_reached_error"]
    assert "does not fit" in errors[0].message
    assert events[-1].type == "session.status_idle"
    assert events[-1].stop_reason.type == "retries_exhausted"
    assert carrying(fake, document) == []

    asked_before = len(summarising(fake))
    send_and_wait(client, session_id, message("what was in it?"))
    send_and_wait(client, session_id, message("and then?"))
    events = list(client.beta.sessions.events.list(session_id))

    assert [e.error.type for e in events if e.type == "session.error"] == [errors[0].type]
    idles = [e.stop_reason.type for e in events if e.type == "session.status_idle"]
    assert idles == ["end_turn", "retries_exhausted", "end_turn", "end_turn"]
    answers = [e.content[0].text for e in events if e.type == "agent.message"]
    assert answers[-1] == "re and then?"
    [asked] = summarising(fake)[asked_before:]
    [brought] = [e for e in events if e.type == "user.message" and len(e.content) > 1]
    # The summarising request names what it leaves out, and where it was.
    assert brought.id in asked
    if media == "pdf":
        assert carrying(fake, document) == []
        assert "application/pdf, 8 pages" in asked
        assert brought.content[1].source.data == document  # the log keeps it whole
    else:
        assert "image/png" in asked and asked.count(PNG) < 11
