"""The stateless harness: the same log always gives the same step and request."""

from __future__ import annotations

from typing import Any

import pytest

from stead.harness import (
    AwaitInput,
    CallModel,
    EndTurn,
    RunTools,
    build_request,
    next_step,
    response_events,
)

Json = dict[str, Any]
AGENT: Json = {
    "model": {"id": "claude-test"},
    "system": "Be brief.",
    "tools": [
        {
            "type": "agent_toolset_20260401",
            "default_config": {"enabled": True, "permission_policy": {"type": "always_allow"}},
            "configs": [
                {"name": "write", "enabled": True, "permission_policy": {"type": "always_ask"}},
                {"name": "grep", "enabled": False, "permission_policy": {"type": "always_allow"}},
            ],
        },
        {
            "type": "custom",
            "name": "lookup",
            "description": "d",
            "input_schema": {"type": "object"},
        },
    ],
}
DEFINITIONS = {
    name: {"name": name, "description": name, "input_schema": {"type": "object"}}
    for name in ("bash", "read", "write", "edit", "glob", "grep", "web_fetch", "web_search")
}


def event(kind: str, event_id: str, **body: Any) -> Json:
    return {"type": kind, "id": event_id, **body}


def user(text: str, event_id: str = "u1") -> Json:
    return event("user.message", event_id, content=[{"type": "text", "text": text}])


def answer(start: str, *agent_events: Json) -> list[Json]:
    return [
        event("span.model_request_start", start),
        *agent_events,
        event("span.model_request_end", f"{start}-end", model_request_start_id=start),
    ]


def test_a_user_message_asks_the_model_and_a_plain_answer_ends_the_turn() -> None:
    log = [user("hi")]
    assert isinstance(next_step(log), CallModel)
    log += answer("s1", event("agent.message", "a1", content=[{"type": "text", "text": "hello"}]))
    assert isinstance(next_step(log), EndTurn)
    log.append(user("again", "u2"))
    assert isinstance(next_step(log), CallModel)


def test_tool_uses_run_wait_or_are_refused_by_policy() -> None:
    uses = [
        event("agent.tool_use", "t1", name="bash", input={}, evaluated_permission="allow"),
        event("agent.tool_use", "t2", name="write", input={}, evaluated_permission="ask"),
        event("agent.custom_tool_use", "c1", name="lookup", input={}),
        event("agent.tool_use", "t3", name="grep", input={}, evaluated_permission="deny"),
    ]
    log = [user("go"), *answer("s1", *uses)]
    step = next_step(log)
    assert isinstance(step, RunTools)
    assert [u["id"] for u in step.run] == ["t1"]
    assert [u["id"] for u, _ in step.refuse] == ["t3"]
    log += [
        event("agent.tool_result", "r1", tool_use_id="t1", content=[]),
        event("agent.tool_result", "r3", tool_use_id="t3", content=[], is_error=True),
    ]
    assert next_step(log) == AwaitInput(["t2", "c1"])
    log.append(event("user.tool_confirmation", "k1", tool_use_id="t2", result="deny"))
    step = next_step(log)
    assert isinstance(step, RunTools) and [u["id"] for u, _ in step.refuse] == ["t2"]
    log.append(event("agent.tool_result", "r2", tool_use_id="t2", content=[], is_error=True))
    assert next_step(log) == AwaitInput(["c1"])
    log.append(event("user.custom_tool_result", "x1", custom_tool_use_id="c1", content=[]))
    assert isinstance(next_step(log), CallModel)


def test_a_failed_request_does_not_count_as_an_answer() -> None:
    log = [
        user("hi"),
        event("span.model_request_start", "s1"),
        event("span.model_request_end", "e1", model_request_start_id="s1", is_error=True),
    ]
    assert isinstance(next_step(log), CallModel)


def test_request_history_uses_event_ids_and_cache_breakpoints() -> None:
    log = [
        user("list files"),
        *answer(
            "s1",
            event("agent.thinking", "th", _internal={"thinking": "hmm", "signature": "sig"}),
            event("agent.message", "a1", content=[{"type": "text", "text": "sure"}]),
            event("agent.tool_use", "t1", name="bash", input={"command": "ls"}),
        ),
        event("agent.tool_result", "r1", tool_use_id="t1", content=[{"type": "text", "text": "x"}]),
    ]
    request = build_request(AGENT, log, DEFINITIONS, max_tokens=100)
    offered = [t["name"] for t in request.tools]
    assert offered == ["bash", "read", "write", "edit", "glob", "web_fetch", "web_search", "lookup"]
    assert request.tools[-1]["cache_control"] == {"type": "ephemeral"}
    assert request.system == [
        {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}
    ]
    roles = [m["role"] for m in request.messages]
    assert roles == ["user", "assistant", "user"]
    assistant = request.messages[1]["content"]
    assert [b["type"] for b in assistant] == ["thinking", "text", "tool_use"]
    assert assistant[2]["id"] == "t1"
    result = request.messages[2]["content"][0]
    assert result["tool_use_id"] == "t1" and result["cache_control"] == {"type": "ephemeral"}
    assert build_request(AGENT, log, DEFINITIONS, max_tokens=100) == request


def test_answers_become_events_with_policies_applied() -> None:
    content = [
        {"type": "thinking", "thinking": "plan", "signature": "s"},
        {"type": "text", "text": "one"},
        {"type": "text", "text": "two"},
        {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {"file_path": "a"}},
        {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {}},
        {"type": "tool_use", "id": "toolu_3", "name": "grep", "input": {}},
    ]
    produced = response_events(content, AGENT, [])
    assert [kind for kind, _ in produced] == [
        "agent.thinking",
        "agent.message",
        "agent.tool_use",
        "agent.custom_tool_use",
        "agent.tool_use",
    ]
    assert produced[1][1]["content"] == [
        {"type": "text", "text": "one"},
        {"type": "text", "text": "two"},
    ]
    write = produced[2][1]
    assert (write["evaluated_permission"], write["evaluation"]) == ("ask", {"type": "always_ask"})
    assert produced[4][1]["evaluated_permission"] == "deny"


@pytest.mark.parametrize(
    "arguments",
    ['{"n": 1e400}', '{"n": NaN}', '{"n": ' + "9" * 5000 + "}", '["ls"]', '"ls"', "7", "null"],
)
def test_tool_arguments_no_read_could_render_are_kept_as_unparsed_text(arguments: str) -> None:
    from stead.harness.providers.openai import from_chat

    call = {"id": "c1", "function": {"name": "bash", "arguments": arguments}}
    answer = {"choices": [{"message": {"tool_calls": [call]}, "finish_reason": "tool_calls"}]}
    (block,) = from_chat(answer).content
    assert block["input"] == {"_unparsed_arguments": arguments}


@pytest.mark.parametrize(
    ("finish", "stop_reason"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        (None, "end_turn"),
    ],
)
def test_an_openai_finish_reason_becomes_the_messages_api_stop_reason(
    finish: str | None, stop_reason: str
) -> None:
    from stead.harness.providers.openai import from_chat

    answer = {"choices": [{"message": {"content": "no"}, "finish_reason": finish}]}
    assert from_chat(answer).stop_reason == stop_reason


def test_an_openai_answer_cut_by_its_length_inside_a_tool_call_is_a_cut_call() -> None:
    """As a Messages API answer cut by max_tokens: the last call's arguments read
    only as far as they came, so the loop neither logs nor runs it; the calls
    before it stand."""
    from stead.harness.providers.openai import from_chat

    whole = {"id": "c1", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    cut = {"id": "c2", "function": {"name": "bash", "arguments": '{"command": "rm -rf /ho'}}
    answer = {"choices": [{"message": {"tool_calls": [whole, cut]}, "finish_reason": "length"}]}
    response = from_chat(answer)
    assert response.stop_reason == "max_tokens"
    assert response.cut_call


def test_an_agents_model_settings_are_in_the_request_only_when_set() -> None:
    """The Messages API takes them as output_config.effort, speed and
    inference_geo; a chat completions server takes effort alone, as
    reasoning_effort; an agent without them sends the request it always did."""
    from stead.harness.model import ModelRequest
    from stead.harness.providers.openai import to_chat
    from stead.schemas import RequestError
    from stead.schemas.agents import check_served

    hello = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    plain = ModelRequest("m", None, [], hello, 16)
    assert plain.as_params() == {"model": "m", "max_tokens": 16, "messages": plain.messages}
    tuned = ModelRequest(
        "m", None, [], plain.messages, 16, effort="max", speed="fast", inference_geo="eu"
    )
    assert {k: tuned.as_params()[k] for k in ("output_config", "speed", "inference_geo")} == {
        "output_config": {"effort": "max"},
        "speed": "fast",
        "inference_geo": "eu",
    }
    assert to_chat(tuned)["reasoning_effort"] == "high"
    assert "reasoning_effort" not in to_chat(plain)
    check_served({"id": "llama", "effort": {"type": "low"}}, {"llama"})
    with pytest.raises(RequestError, match=r"^model\.speed: 'llama' is answered by an OpenAI"):
        check_served({"id": "llama", "speed": "fast"}, {"llama"})
    check_served({"id": "claude-x", "speed": "fast"}, {"llama"})
