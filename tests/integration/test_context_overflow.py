"""A request the model refuses as longer than its window, through the SDK
against a real server and a fake model that counts every request and refuses
one over its 20,000-token window, as the API does (``prompt is too long``).

stead's estimate of a request can fall short of the model's count (a PDF's
bytes, text of few characters a token): the request it sends then does not
fit. The loop compacts the context and asks again, as it does when its own
estimate says the request does not fit, within the same limit.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.harness import SUMMARY_INSTRUCTION
from stead.testing import FakeModel, ServeForker, ServerProcess, Text, Turn, when_asked
from stead.testing.scripts import last_user_text
from tests.conftest import loop_env, sdk_of
from tests.integration.helpers import message, new_session, send_and_wait
from tests.pdfs import pdf_base64, pdf_message

MODEL = "claude-sonnet-4-6"
WINDOW = 20_000
SUMMARY = "SUMMARY: the user sent long numbered messages and a document."


def answer(body: dict[str, Any]) -> Turn:
    return Turn([Text(f"re {last_user_text(body)[:30]}")])


class Answering:
    """The script, keeping each request it answers: the fake refuses the others
    before it asks the script."""

    def __init__(self) -> None:
        self.answered: list[dict[str, Any]] = []
        self._script = when_asked(SUMMARY_INSTRUCTION, Turn([Text(SUMMARY)]), answer)

    def __call__(self, body: dict[str, Any]) -> Turn:
        self.answered.append(body)
        return self._script(body)


@pytest.fixture
def script() -> Answering:
    return Answering()


@pytest.fixture
def window(request: pytest.FixtureRequest) -> int:
    """The model's window, ``WINDOW`` unless a test asks for another."""
    return int(getattr(request, "param", WINDOW))


@pytest.fixture
def fake(script: Answering, window: int) -> Iterator[FakeModel]:
    with FakeModel(script, context_window=window) as started:
        yield started


@pytest.fixture
def client(
    tmp_path: Path, fake: FakeModel, forker: ServeForker, window: int
) -> Iterator[anthropic.Anthropic]:
    windows = json.dumps({MODEL: window, "local": window})
    models = json.dumps({"local": fake.openai_url})
    env = loop_env(fake, STEAD_CONTEXT_WINDOWS=windows, STEAD_OPENAI_MODELS=models)
    server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
    try:
        with sdk_of(server) as sdk:
            yield sdk
    finally:
        server.stop()


def refused(fake: FakeModel, script: Answering) -> list[int]:
    """The ordinals of the requests the fake refused as too long."""
    return [r.ordinal for r in fake.requests if r.body not in script.answered]


def summarising(fake: FakeModel) -> list[int]:
    return [r.ordinal for r in fake.requests if SUMMARY_INSTRUCTION in json.dumps(r.body)]


def session_on(client: anthropic.Anthropic, model: str) -> str:
    if model == MODEL:
        return new_session(client)
    agent = client.beta.agents.create(name="local", model=model)
    environment = client.beta.environments.create(name=f"local-{uuid.uuid4().hex[:10]}")
    return client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id


@pytest.mark.parametrize("model", [MODEL, "local"])
def test_a_request_the_model_counts_over_its_window_is_compacted_and_asked_again(
    client: anthropic.Anthropic, fake: FakeModel, script: Answering, model: str
) -> None:
    """Three long messages (some 12,000 tokens), then a one-page PDF whose
    bytes the model counts at some 10,000 tokens: stead's estimate of that
    request fits (a page counts 3,000), the model's count does not. The turn
    used to end there with ``model_request_failed_error``, and so did every
    later one: no answer ever told stead how large the context was."""
    session_id = session_on(client, model)
    for number in range(3):
        send_and_wait(client, session_id, message(f"message {number} " + "u" * 16_000))
    document = pdf_base64(1, filler=29_500)
    send_and_wait(client, session_id, pdf_message("message 3, with a document", document))
    send_and_wait(client, session_id, message("message 4"))
    events = list(client.beta.sessions.events.list(session_id))

    errors = [e.error for e in events if e.type == "session.error"]
    assert len(errors) == 1
    assert errors[0].retry_status.type == "retrying"
    too_long = "prompt is too long" if model == MODEL else "maximum context length"
    assert too_long in errors[0].message
    idles = [e.stop_reason.type for e in events if e.type == "session.status_idle"]
    assert idles == ["end_turn"] * 5
    answers = [e.content[0].text for e in events if e.type == "agent.message"]
    assert answers[-2:] == ["re message 3, with a document", "re message 4"]
    assert any(e.type == "agent.thread_context_compacted" for e in events)
    # One request was refused; the summary came next, then the request again.
    assert len(refused(fake, script)) == 1
    assert summarising(fake)[0] == refused(fake, script)[0] + 1


def test_a_document_the_model_counts_over_the_window_alone_is_summarised_as_a_note(
    client: anthropic.Anthropic, fake: FakeModel, script: Answering
) -> None:
    """A one-page PDF whose bytes the model counts at some 30,000 tokens
    (stead's estimate: 3,000): refused, the turn compacts, and the part it
    summarises is the very message that holds the PDF. The summarising request
    showed the document whole, the model refused it too, and the turn ended
    with ``compaction_limit_reached_error``, as did the next (its context did
    not fit either). Now the document is sized as the model counted the
    request, and too large for the summarising request it is a note there."""
    session_id = new_session(client)
    send_and_wait(client, session_id, message("hello"))
    document = pdf_base64(1, filler=90_000)
    send_and_wait(client, session_id, pdf_message("a large one", document))
    send_and_wait(client, session_id, message("and now?"))
    events = list(client.beta.sessions.events.list(session_id))

    errors = [
        (e.error.type, e.error.retry_status.type) for e in events if e.type == "session.error"
    ]
    assert errors == [("model_request_failed_error", "retrying")]
    idles = [e.stop_reason.type for e in events if e.type == "session.status_idle"]
    assert idles == ["end_turn"] * 3
    answers = [e.content[0].text for e in events if e.type == "agent.message"]
    assert answers[-1] == "re and now?"
    [asked] = summarising(fake)
    assert refused(fake, script) == [asked - 1]
    [brought] = [e for e in events if e.type == "user.message" and len(e.content) > 1]
    summarised = json.dumps(next(r.body for r in fake.requests if r.ordinal == asked))
    assert document not in summarised
    assert "[document (application/pdf, 1 page, 89 KB), in the user's message" in summarised
    assert brought.id in summarised
    assert [r.ordinal for r in fake.requests if document in json.dumps(r.body)] == [asked - 1]


@pytest.mark.parametrize("window", [100_000], indirect=True)
def test_a_summarising_request_refused_for_its_media_is_asked_again_without_them(
    client: anthropic.Anthropic, fake: FakeModel, script: Answering
) -> None:
    """A 100,000-token window: three messages of 16,000 tokens, then one of
    20,000 with a one-page PDF the model counts at some 40,000 (stead: 3,000).
    Refused, and beside so much text the model's count of that request is not
    much over stead's, so the document seems to fit the summarising request,
    which the model refuses as well. The turn ended there; now it asks for the
    summary again with every medium a note, and goes on."""
    session_id = new_session(client)
    for number in range(3):
        send_and_wait(client, session_id, message(f"message {number} " + "u" * 64_000))
    document = pdf_base64(1, filler=120_000)
    send_and_wait(client, session_id, pdf_message("message 3 " + "d" * 80_000, document))
    send_and_wait(client, session_id, message("message 4"))
    events = list(client.beta.sessions.events.list(session_id))

    errors = [e.error for e in events if e.type == "session.error"]
    assert [(e.type, e.retry_status.type) for e in errors] == [
        ("model_request_failed_error", "retrying")
    ] * 2
    assert "asking again with no media" in errors[1].message
    idles = [e.stop_reason.type for e in events if e.type == "session.status_idle"]
    assert idles == ["end_turn"] * 5
    answers = [e.content[0].text for e in events if e.type == "agent.message"]
    assert answers[-1] == "re message 4"
    first, again = summarising(fake)
    assert refused(fake, script) == [first - 1, first] and again == first + 1
    shown_again = json.dumps(next(r.body for r in fake.requests if r.ordinal == again))
    assert document not in shown_again and "application/pdf, 1 page" in shown_again
