"""Compaction through the SDK against a real server and the fake model: a
session whose log outgrows a small context window is summarised, keeps
working, and a SIGKILL while the summary is written rebuilds the same request.

The model's window is 2,000 tokens (``STEAD_CONTEXT_WINDOWS``), so a request
is compacted past 1,600 and keeps at most 500 word for word. Each user message
is about 100 tokens and each answer about 500: the fourth turn's request is
the first that does not fit.
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
from stead.testing import (
    FakeModel,
    ReceivedRequest,
    ServeForker,
    ServerProcess,
    Text,
    ToolCall,
    Turn,
    when_asked,
)
from stead.testing.scripts import last_user_text
from tests.conftest import loop_env, make_client, sdk_of
from tests.integration.helpers import message, new_session, wait_idle

MODEL = "claude-sonnet-4-6"
WINDOWS = json.dumps({MODEL: 2000})
SUMMARY = "SUMMARY: the user sent numbered messages; each was answered."
ANSWER_USAGE = {"input_tokens": 11, "output_tokens": 3}
SUMMARY_USAGE = {"input_tokens": 101, "output_tokens": 7}
LEASE_SECONDS = "30"


def answer(body: dict[str, Any]) -> Turn:
    said = last_user_text(body)[:30]
    return Turn([Text(f"re {said} " + "." * 2000)], usage=ANSWER_USAGE)


SCRIPT = when_asked(SUMMARY_INSTRUCTION, Turn([Text(SUMMARY)], usage=SUMMARY_USAGE), answer)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(SCRIPT) as started:
        yield started


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("compaction")
    env = loop_env(fake, STEAD_CONTEXT_WINDOWS=WINDOWS)
    process = ServerProcess(data, env=env, forker=forker).start()
    yield process
    process.stop()


@pytest.fixture
def client(server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(server) as sdk:
        yield sdk


def text(token: str, number: int) -> str:
    return f"{token} message {number} " + "u" * 400


def of_session(fake: FakeModel, token: str) -> list[ReceivedRequest]:
    return [r for r in fake.requests if token in json.dumps(r.body)]


def summarising(request: ReceivedRequest) -> bool:
    return SUMMARY_INSTRUCTION in json.dumps(request.body)


def first_text(request: ReceivedRequest) -> str:
    return str(request.body["messages"][0]["content"][0]["text"])


def talk(client: anthropic.Anthropic, session_id: str, token: str, numbers: range) -> None:
    for number in numbers:
        client.beta.sessions.events.send(session_id, events=[message(text(token, number))])
        wait_idle(client, session_id)


def types(client: anthropic.Anthropic, session_id: str) -> list[Any]:
    return list(client.beta.sessions.events.list(session_id))


def test_a_long_session_compacts_and_keeps_working(
    client: anthropic.Anthropic, fake: FakeModel
) -> None:
    token = uuid.uuid4().hex[:12]
    session_id = new_session(client)
    talk(client, session_id, token, range(3))
    assert not any(summarising(r) for r in of_session(fake, token))
    talk(client, session_id, token, range(3, 5))

    events = types(client, session_id)
    compacted = [e for e in events if e.type == "agent.thread_context_compacted"]
    assert len(compacted) == 1
    assert (compacted[0].model_extra or {}).get("pre_compaction_tokens", 0) > 1600
    answers = [e for e in events if e.type == "agent.message"]
    assert len(answers) == 5 and f"re {token} message 4" in answers[-1].content[0].text
    idles = [e for e in events if e.type == "session.status_idle"]
    assert [i.stop_reason.type for i in idles] == ["end_turn"] * 5

    requests = of_session(fake, token)
    asked = [i for i, r in enumerate(requests) if summarising(r)]
    assert len(asked) == 1
    summary_request = requests[asked[0]]
    assert f"{token} message 0" in json.dumps(summary_request.body)
    # Every request after it opens with the summary instead of the old turns.
    after = requests[asked[0] + 1 :]
    assert len(after) == 2
    for request in after:
        assert first_text(request) == f"<conversation-summary>\n{SUMMARY}\n</conversation-summary>"
        assert f"{token} message 0" not in json.dumps(request.body)
        assert f"{token} message 3" in json.dumps(request.body)

    # The summarising request counts in the session's usage like any other.
    usage = client.beta.sessions.retrieve(session_id).usage
    assert usage.input_tokens == 5 * ANSWER_USAGE["input_tokens"] + SUMMARY_USAGE["input_tokens"]
    assert usage.output_tokens == 5 * ANSWER_USAGE["output_tokens"] + SUMMARY_USAGE["output_tokens"]


def test_a_message_too_large_to_fit_reaches_the_compaction_limit(
    client: anthropic.Anthropic, fake: FakeModel
) -> None:
    token = uuid.uuid4().hex[:12]
    session_id = new_session(client)
    client.beta.sessions.events.send(session_id, events=[message(f"{token} " + "w" * 9000)])
    wait_idle(client, session_id)
    events = types(client, session_id)
    errors = [e for e in events if e.type == "session.error"]
    assert len(errors) == 1
    assert errors[0].error.type == "compaction_limit_reached_error"
    assert errors[0].error.retry_status.type == "exhausted"
    assert events[-1].type == "session.status_idle"
    assert events[-1].stop_reason.type == "retries_exhausted"
    assert of_session(fake, token) == []  # nothing was sent that could not fit


@pytest.mark.parametrize("point", ["compaction.before_request:1", "compaction.after_answer:1"])
def test_a_sigkill_mid_compaction_asks_the_same_request_and_logs_it_once(
    tmp_path: Path, fake: FakeModel, forker: ServeForker, point: str
) -> None:
    data = tmp_path / "data"
    env = loop_env(fake, STEAD_CONTEXT_WINDOWS=WINDOWS, STEAD_LEASE_SECONDS=LEASE_SECONDS)
    doomed = ServerProcess(data, env={**env, "STEAD_FAILPOINTS": point}, forker=forker).start()
    token = uuid.uuid4().hex[:12]
    try:
        with sdk_of(doomed) as sdk:
            session_id = new_session(sdk)
            talk(sdk, session_id, token, range(3))
            sdk.beta.sessions.events.send(session_id, events=[message(text(token, 3))])
        assert doomed.wait_exit(timeout=30), "the failpoint did not kill the server"
    finally:
        doomed.kill()
    key = doomed.first_key
    assert key
    survivor = ServerProcess(data, env=env, forker=forker).start()
    try:
        with make_client(survivor.url, key) as sdk:
            wait_idle(sdk, session_id, timeout=60)
            events = types(sdk, session_id)
    finally:
        survivor.stop()

    assert sum(e.type == "agent.thread_context_compacted" for e in events) == 1
    assert events[-1].type == "session.status_idle"
    assert events[-1].stop_reason.type == "end_turn"
    assert sum(e.type == "session.status_rescheduled" for e in events) == 1
    requests = of_session(fake, token)
    asked = [r.body for r in requests if summarising(r)]
    sent_before_the_kill = 1 if point.startswith("compaction.after_answer") else 0
    assert len(asked) == 1 + sent_before_the_kill
    assert all(body == asked[0] for body in asked)
    last = requests[-1]
    assert first_text(last) == f"<conversation-summary>\n{SUMMARY}\n</conversation-summary>"


NO_SUMMARIES = {
    "no text": Turn([ToolCall("bash", {"command": "ls"})], usage=SUMMARY_USAGE),
    "refused": Turn(
        [Text("I can't help with summarising this.")], stop_reason="refusal", usage=SUMMARY_USAGE
    ),
}


@pytest.mark.parametrize("why", NO_SUMMARIES)
def test_an_answer_with_no_summary_ends_the_turn_and_is_counted(
    tmp_path: Path, forker: ServeForker, why: str
) -> None:
    no_summary = NO_SUMMARIES[why]
    with FakeModel(when_asked(SUMMARY_INSTRUCTION, no_summary, answer)) as silent:
        env = loop_env(silent, STEAD_CONTEXT_WINDOWS=WINDOWS)
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            with sdk_of(server) as sdk:
                session_id = new_session(sdk)
                talk(sdk, session_id, "t", range(4))
                events = types(sdk, session_id)
                usage = sdk.beta.sessions.retrieve(session_id).usage
        finally:
            server.stop()
    assert not any(e.type == "agent.thread_context_compacted" for e in events)
    errors = [e for e in events if e.type == "session.error"]
    assert [e.error.type for e in errors] == ["model_request_failed_error"]
    assert why in errors[0].error.message
    assert events[-1].type == "session.status_idle"
    assert events[-1].stop_reason.type == "retries_exhausted"
    assert usage.input_tokens == 3 * ANSWER_USAGE["input_tokens"] + SUMMARY_USAGE["input_tokens"]


def wordy(body: dict[str, Any]) -> Turn:
    """Writes a summary longer than the whole 2,000-token window."""
    if SUMMARY_INSTRUCTION in last_user_text(body):
        return Turn([Text(f"{SUMMARY} " + "s" * 9000 + " END")], usage=SUMMARY_USAGE)
    return answer(body)


def test_a_summary_longer_than_the_window_is_cut_and_the_session_goes_on(
    tmp_path: Path, forker: ServeForker
) -> None:
    """Kept whole, the summary alone filled the window: every later request was
    compacted again, each summary as long, until three compactions in a row
    ended the turn at the limit; and since no answer came after them, every
    later message ended at the limit at once, for good."""
    with FakeModel(wordy) as model:
        env = loop_env(model, STEAD_CONTEXT_WINDOWS=WINDOWS)
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            with sdk_of(server) as sdk:
                session_id = new_session(sdk)
                talk(sdk, session_id, "t", range(6))
                events = types(sdk, session_id)
        finally:
            server.stop()
        answered = [r for r in model.requests if not summarising(r)]
    assert [e.error.message for e in events if e.type == "session.error"] == []
    assert [e.stop_reason.type for e in events if e.type == "session.status_idle"] == [
        "end_turn"
    ] * 6
    summary = first_text(answered[-1])
    assert summary.startswith(f"<conversation-summary>\n{SUMMARY}")
    assert "characters left out" in summary and summary.endswith("END\n</conversation-summary>")


def test_a_model_on_an_openai_compatible_server_compacts_too(
    tmp_path: Path, fake: FakeModel, forker: ServeForker
) -> None:
    models = json.dumps({"local": fake.openai_url})
    env = loop_env(fake, STEAD_OPENAI_MODELS=models, STEAD_CONTEXT_WINDOWS='{"local": 2000}')
    server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
    token = uuid.uuid4().hex[:12]
    try:
        with sdk_of(server) as sdk:
            agent = sdk.beta.agents.create(name="local", model="local")
            environment = sdk.beta.environments.create(name=f"local-{token}")
            session_id = sdk.beta.sessions.create(agent=agent.id, environment_id=environment.id).id
            talk(sdk, session_id, token, range(5))
            events = types(sdk, session_id)
    finally:
        server.stop()
    assert sum(e.type == "agent.thread_context_compacted" for e in events) == 1
    assert [e.stop_reason.type for e in events if e.type == "session.status_idle"] == [
        "end_turn"
    ] * 5
    requests = of_session(fake, token)
    assert all(r.path.endswith("/chat/completions") for r in requests)
    asked = [i for i, r in enumerate(requests) if summarising(r)]
    assert len(asked) == 1
    for request in requests[asked[0] + 1 :]:
        assert SUMMARY in json.dumps(request.body)
        assert f"{token} message 0" not in json.dumps(request.body)


def dense(body: dict[str, Any]) -> Turn:
    """An answer whose model counts a token a character, four times the estimate
    (as it counts text of few characters a token)."""
    if SUMMARY_INSTRUCTION in json.dumps(body):
        return Turn([Text(SUMMARY)], usage=SUMMARY_USAGE)
    said = last_user_text(body)[:30]
    reply = f"re {said} " + "." * 200
    counted = {"input_tokens": len(json.dumps(body)), "output_tokens": len(reply)}
    return Turn([Text(reply)], usage=counted)


def test_the_part_kept_fits_the_window_as_the_model_counts_it(
    tmp_path: Path, forker: ServeForker
) -> None:
    with FakeModel(dense) as counting:
        env = loop_env(counting, STEAD_CONTEXT_WINDOWS=WINDOWS)
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            with sdk_of(server) as sdk:
                session_id = new_session(sdk)
                talk(sdk, session_id, "t", range(8))
                events = types(sdk, session_id)
        finally:
            server.stop()
        answered = [r for r in counting.requests if not summarising(r)]
    assert [e.stop_reason.type for e in events if e.type == "session.status_idle"] == [
        "end_turn"
    ] * 8
    # Kept by the estimate alone, the kept part was the model's whole window:
    # each step compacted again and sent more than the window.
    assert max(len(json.dumps(r.body)) for r in answered) <= 2000
    assert sum(e.type == "agent.thread_context_compacted" for e in events) <= 4


def counting_refusals(body: dict[str, Any]) -> Turn:
    """Counts a request as the estimate does (four characters a token) and
    refuses a message that asks it to."""
    if SUMMARY_INSTRUCTION in json.dumps(body):
        return Turn([Text(SUMMARY)], usage=SUMMARY_USAGE)
    said = last_user_text(body)
    counted = {"input_tokens": len(json.dumps(body)) // 4, "output_tokens": 5}
    if "refuse" in said:
        return Turn([Text("no")], stop_reason="refusal", usage=counted)
    return Turn([Text(f"re {said[:30]}")], usage=counted)


def test_a_refused_turn_no_longer_counts_toward_the_window(
    tmp_path: Path, forker: ServeForker
) -> None:
    """The model's count of the refused request described a context the next
    request no longer carries: taken for it, a short session compacted (or
    could never go on) after one large refused message."""
    with FakeModel(counting_refusals) as counting:
        env = loop_env(counting, STEAD_CONTEXT_WINDOWS=WINDOWS)
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            with sdk_of(server) as sdk:
                session_id = new_session(sdk)
                for said in ("hello", "refuse " + "r" * 5800, "hello again", "and again"):
                    sdk.beta.sessions.events.send(session_id, events=[message(said)])
                    wait_idle(sdk, session_id)
                events = types(sdk, session_id)
        finally:
            server.stop()
        asked = [r for r in counting.requests if summarising(r)]
    assert [e.error.message for e in events if e.type == "session.error"] == []
    assert [e.stop_reason.type for e in events if e.type == "session.status_idle"] == [
        "end_turn",
        "refusal",
        "end_turn",
        "end_turn",
    ]
    assert not any(e.type == "agent.thread_context_compacted" for e in events)
    assert asked == []


def test_a_context_that_takes_many_pieces_to_summarise_is_compacted_in_full(
    tmp_path: Path, fake: FakeModel, forker: ServeForker
) -> None:
    """A session grown under a larger window, served then with a smaller one:
    its older part is summarised in more pieces than the limit of compactions
    in a row, each piece making the context smaller. Counted as compactions
    that did not help, the session ended with compaction_limit_reached_error
    at every message from then on."""
    data = tmp_path / "data"
    large = loop_env(fake, STEAD_CONTEXT_WINDOWS=json.dumps({MODEL: 20000}))
    first = ServerProcess(data, env=large, forker=forker).start()
    token = uuid.uuid4().hex[:12]
    try:
        with sdk_of(first) as sdk:
            session_id = new_session(sdk)
            talk(sdk, session_id, token, range(20))
    finally:
        first.stop()
    key = first.first_key
    assert key
    second = ServerProcess(data, env=loop_env(fake, STEAD_CONTEXT_WINDOWS=WINDOWS), forker=forker)
    second.start()
    try:
        with make_client(second.url, key) as sdk:
            talk(sdk, session_id, token, range(20, 21))
            events = types(sdk, session_id)
    finally:
        second.stop()
    assert [e.error.message for e in events if e.type == "session.error"] == []
    assert events[-1].type == "session.status_idle"
    assert events[-1].stop_reason.type == "end_turn"
    assert sum(e.type == "agent.thread_context_compacted" for e in events) > 3
