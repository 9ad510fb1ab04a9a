"""PDFs sent as bytes count by their pages, through the SDK against a real
server and the fake model: a session compacts before a request whose PDF
would not fit beside the conversation, and never sends one that cannot fit
at all. A PDF's pages cost the model some 1,500 to 3,000 tokens each; counted
as one image (1,600 tokens), a long PDF went out in a request far over the
model's window, which the model refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.harness import SUMMARY_INSTRUCTION
from stead.harness.windows import PDF_PAGE_TOKENS
from stead.testing import FakeModel, ServeForker, ServerProcess, Text, Turn, when_asked
from stead.testing.scripts import last_user_text
from tests.conftest import loop_env, sdk_of
from tests.integration.helpers import message, new_session, wait_idle
from tests.pdfs import pdf_base64

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


def with_document(text: str, data: str) -> dict[str, Any]:
    source = {"type": "base64", "media_type": "application/pdf", "data": data}
    content = [{"type": "text", "text": text}, {"type": "document", "source": source}]
    return {"type": "user.message", "content": content}


def send(client: anthropic.Anthropic, session_id: str, event: dict[str, Any]) -> None:
    client.beta.sessions.events.send(session_id, events=[event])
    wait_idle(client, session_id)


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
        send(client, session_id, message(f"message {number} " + "u" * 12_000))
    document = pdf_base64(4, object_streams=object_streams)
    send(client, session_id, with_document("message 3, with a document", document))
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


def test_a_pdf_of_more_pages_than_the_window_holds_is_never_sent(
    client: anthropic.Anthropic, fake: FakeModel
) -> None:
    session_id = new_session(client)
    send(client, session_id, message("hello"))
    document = pdf_base64(8)  # 24,000 tokens, in some 3 KB
    send(client, session_id, with_document("too long", document))
    events = list(client.beta.sessions.events.list(session_id))

    errors = [e.error for e in events if e.type == "session.error"]
    assert [e.type for e in errors] == ["compaction_limit_reached_error"]
    assert "does not fit" in errors[0].message
    assert events[-1].type == "session.status_idle"
    assert events[-1].stop_reason.type == "retries_exhausted"
    assert carrying(fake, document) == []
