"""Upstream faults: sessions reschedule and finish, or end with the spec's error
events, and never hang. Also: a model served by an OpenAI-compatible endpoint.
On SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.testing import (
    Disconnect,
    FakeModel,
    FaultRule,
    HttpError,
    ServeForker,
    ServerProcess,
    Stall,
    StreamError,
    Text,
    ToolCall,
    Turn,
    assistant_turns,
)
from tests.conftest import loop_env, sdk_of, store_env
from tests.databases import BACKENDS

Json = dict[str, Any]


def _first_text(body: Json) -> str:
    for message in body.get("messages", []):
        for block in message.get("content", []) if isinstance(message.get("content"), list) else []:
            if block.get("type") == "text":
                return str(block["text"])
        if isinstance(message.get("content"), str) and message["role"] == "user":
            return str(message["content"])
    return ""


def _about(word: str) -> Any:
    return lambda request: _first_text(request.body).startswith(word)


def script(body: Json) -> Turn:
    if _first_text(body).startswith("tool") and assistant_turns(body) == 0:
        return Turn([ToolCall("glob", {"pattern": "*"})])
    if _first_text(body).startswith("surrogate"):
        return Turn([Text("a lone \ud800 half")])
    if _first_text(body).startswith("no id") and assistant_turns(body) == 0:
        return Turn([ToolCall("glob", {"pattern": "*"}, id="")])
    if _first_text(body).startswith("array") and assistant_turns(body) == 0:
        return Turn([ToolCall("bash", ["ls"])])  # type: ignore[arg-type]
    if _first_text(body).startswith("nonfinite"):  # sent as the JSON Infinity
        return Turn([ToolCall("bash", {"command": "ls", "timeout": float("inf")})])
    return Turn([Text("recovered fine")])


FAULTS = [
    FaultRule(HttpError(529), times=2, when=_about("overload")),
    FaultRule(HttpError(429, retry_after=0), times=1, when=_about("ratelimit")),
    FaultRule(Disconnect(after_chunks=3), times=1, when=_about("drop")),
    FaultRule(StreamError(after_chunks=2), times=1, when=_about("midstream")),
    FaultRule(Stall(seconds=60), times=1, when=_about("stall")),
    FaultRule(HttpError(529), times=None, when=_about("dead")),
    FaultRule(HttpError(400), times=None, when=_about("invalid")),
]


@pytest.fixture(scope="module", params=BACKENDS)
def fault_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    with store_env(request) as extra, FakeModel(script, faults=FAULTS) as fake:
        env = loop_env(
            fake,
            **extra,
            STEAD_RETRY_INITIAL_SECONDS="0.05",
            STEAD_RETRY_MAX_SECONDS="0.2",
            STEAD_UPSTREAM_RETRIES="3",
            STEAD_MODEL_READ_TIMEOUT_SECONDS="1",
            STEAD_OPENAI_MODELS=json.dumps({"local-llama": fake.openai_url}),
        )
        process = ServerProcess(tmp_path_factory.mktemp("faults"), env=env, forker=forker).start()
        yield process
        process.stop()


@pytest.fixture
def sdk(fault_server: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(fault_server) as client:
        yield client


def run_turn(sdk: anthropic.Anthropic, text: str, model: str = "claude-sonnet-4-6") -> list[Any]:
    agent = sdk.beta.agents.create(
        name="f", model=model, tools=[{"type": "agent_toolset_20260401"}]
    )
    env = sdk.beta.environments.create(name=f"f-{uuid.uuid4().hex[:8]}")
    session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
    events = []
    with sdk.beta.sessions.events.stream(session.id) as stream:
        sdk.beta.sessions.events.send(
            session.id,
            events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}],
        )
        for event in stream:
            events.append(event)
            if event.type == "session.status_idle":
                break
    return events


@pytest.mark.parametrize(
    ("text", "retries", "error_type"),
    [
        ("overload twice", 2, "model_overloaded_error"),
        ("ratelimit once", 1, "model_rate_limited_error"),
        ("drop the stream", 1, "model_request_failed_error"),
        ("midstream error", 1, "model_overloaded_error"),
        ("stall past the timeout", 1, "model_request_failed_error"),
    ],
)
def test_transient_faults_reschedule_then_finish(
    sdk: anthropic.Anthropic, text: str, retries: int, error_type: str
) -> None:
    events = run_turn(sdk, text)
    errors = [e for e in events if e.type == "session.error"]
    assert len(errors) == retries
    assert all(e.error.retry_status.type == "retrying" for e in errors)
    if text.startswith(("overload", "ratelimit", "midstream")):
        assert {e.error.type for e in errors} == {error_type}
    assert sum(e.type == "session.status_rescheduled" for e in events) == retries
    assert events[-1].stop_reason.type == "end_turn"
    answer = next(e for e in events if e.type == "agent.message")
    assert answer.content[0].text == "recovered fine"


def test_persistent_overload_ends_with_retries_exhausted(sdk: anthropic.Anthropic) -> None:
    events = run_turn(sdk, "dead upstream")
    errors = [e for e in events if e.type == "session.error"]
    assert [e.error.retry_status.type for e in errors] == ["retrying"] * 3 + ["exhausted"]
    assert errors[-1].error.type == "model_overloaded_error"
    ends = [e for e in events if e.type == "span.model_request_end"]
    assert ends and ends[-1].is_error
    assert events[-1].stop_reason.type == "retries_exhausted"


def test_a_rejected_request_is_not_retried(sdk: anthropic.Anthropic) -> None:
    events = run_turn(sdk, "invalid request")
    errors = [e for e in events if e.type == "session.error"]
    assert [e.error.retry_status.type for e in errors] == ["exhausted"]
    assert not any(e.type == "session.status_rescheduled" for e in events)
    assert events[-1].stop_reason.type == "retries_exhausted"


def test_a_lone_surrogate_in_an_answer_is_logged_as_a_replacement_character(
    sdk: anthropic.Anthropic,
) -> None:
    events = run_turn(sdk, "surrogate in the answer")
    assert not any(e.type == "session.error" for e in events)
    assert events[-1].stop_reason.type == "end_turn"
    answer = next(e for e in events if e.type == "agent.message")
    assert answer.content[0].text == "a lone \ufffd half"


def test_a_non_finite_number_in_a_tool_call_is_an_unreadable_answer(
    sdk: anthropic.Anthropic,
) -> None:
    events = run_turn(sdk, "nonfinite number in a call")
    errors = [e for e in events if e.type == "session.error"]
    assert [e.error.retry_status.type for e in errors] == ["retrying"] * 3 + ["exhausted"]
    assert "input.timeout: the number is not finite" in errors[-1].error.message
    assert not any(e.type == "agent.tool_use" for e in events)
    assert events[-1].stop_reason.type == "retries_exhausted"


def test_a_tool_call_whose_input_is_no_object_is_an_unreadable_answer(
    sdk: anthropic.Anthropic,
) -> None:
    events = run_turn(sdk, "array as a call's input")
    errors = [e for e in events if e.type == "session.error"]
    assert [e.error.retry_status.type for e in errors] == ["retrying"] * 3 + ["exhausted"]
    assert "input is not an object" in errors[-1].error.message
    assert not any(e.type == "agent.tool_use" for e in events)


def test_an_openai_compatible_call_whose_arguments_are_no_object_is_the_tool_s_error(
    sdk: anthropic.Anthropic,
) -> None:
    events = run_turn(sdk, "array as a call's arguments", model="local-llama")
    use = next(e for e in events if e.type == "agent.tool_use")
    assert use.input == {"_unparsed_arguments": '["ls"]'}
    assert next(e for e in events if e.type == "agent.tool_result").is_error
    assert events[-1].stop_reason.type == "end_turn"


def test_an_openai_compatible_tool_call_without_an_id_runs(sdk: anthropic.Anthropic) -> None:
    events = run_turn(sdk, "no id on the call", model="local-llama")
    assert not any(e.type == "session.error" for e in events)
    assert next(e for e in events if e.type == "agent.tool_result").is_error is not True
    assert events[-1].stop_reason.type == "end_turn"


def test_an_openai_compatible_model_runs_a_turn_with_tools(sdk: anthropic.Anthropic) -> None:
    events = run_turn(sdk, "tool call through a local model", model="local-llama")
    kinds = [e.type for e in events]
    assert "agent.tool_use" in kinds and "agent.tool_result" in kinds
    assert events[-1].stop_reason.type == "end_turn"
    assert next(e for e in events if e.type == "agent.message").content[0].text == "recovered fine"
