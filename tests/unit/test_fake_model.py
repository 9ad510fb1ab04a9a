"""The fake upstream model, driven over real HTTP by the official anthropic SDK
(and raw httpx2 for the OpenAI dialect): wire format, turn choice, faults, lifecycle."""

from __future__ import annotations

import json
import time
from typing import Any, TypeAlias, cast

import anthropic
import anyio
import anyio.to_thread
import httpx2
import pytest
from anthropic.types import Message, RawMessageStreamEvent

from stead.testing import (
    ChunkDelay,
    Delay,
    Disconnect,
    FakeModel,
    FaultRule,
    HttpError,
    ReceivedRequest,
    Stall,
    StreamError,
    Text,
    Thinking,
    ToolCall,
    Turn,
    client_tls,
    when_asked,
)
from stead.testing.faults import FaultBook

pytestmark = pytest.mark.anyio

Events: TypeAlias = anthropic.AsyncStream[RawMessageStreamEvent]
USER: list[Any] = [{"role": "user", "content": "hi"}]
LONG_INPUT = {"command": "grep -rn 'needle' /workspace/src", "timeout": 30, "flags": ["-i"]}


# Short reads, but a connect that a busy machine can still make: only the read may time out.
IMPATIENT = httpx2.Timeout(0.3, connect=30.0)


def sdk(fake: FakeModel, **options: Any) -> anthropic.AsyncAnthropic:
    settings: dict[str, Any] = {"max_retries": 0, "timeout": 10.0, **options}
    return anthropic.AsyncAnthropic(
        base_url=fake.url, api_key="x", _strict_response_validation=True, **settings
    )


def conversation(assistant_turns: int) -> list[Any]:
    """A conversation that already holds ``assistant_turns`` assistant messages."""
    messages = list(USER)
    for i in range(assistant_turns):
        messages += [{"role": "assistant", "content": f"a{i}"}, {"role": "user", "content": "go"}]
    return messages


def _request(fields: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 100, "messages": USER, **fields}


async def create(client: anthropic.AsyncAnthropic, **fields: Any) -> Message:
    return cast(Message, await client.messages.create(**_request(fields)))


async def open_stream(client: anthropic.AsyncAnthropic, **fields: Any) -> Events:
    return cast(Events, await client.messages.create(**_request(fields), stream=True))


async def test_a_text_turn_without_streaming() -> None:
    async with FakeModel([Turn([Text("hello there")])]) as fake, sdk(fake) as client:
        message = await create(client, model="claude-test")
    assert message.content[0].type == "text" and message.content[0].text == "hello there"
    assert (message.model, message.stop_reason, message.id[:4]) == (
        "claude-test",
        "end_turn",
        "msg_",
    )
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0


async def test_a_stream_sends_the_events_of_the_hosted_api() -> None:
    async with FakeModel([Turn([Text("a longer answer, in pieces")])]) as fake, sdk(fake) as client:
        stream = await open_stream(client)
        events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    texts = [
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    ]
    assert len(texts) > 1 and "".join(texts) == "a longer answer, in pieces"
    delta = events[-2]
    assert delta.type == "message_delta" and delta.delta.stop_reason == "end_turn"
    assert delta.usage.output_tokens > 0


async def test_raw_stream_frames_include_ping_and_event_names() -> None:
    async with (
        FakeModel([Turn([Text("hi")])]) as fake,
        httpx2.AsyncClient(verify=client_tls()) as http,
    ):
        body = {"model": "m", "max_tokens": 5, "messages": USER, "stream": True}
        async with http.stream("POST", f"{fake.url}/v1/messages", json=body) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            names = [
                line[7:] async for line in response.aiter_lines() if line.startswith("event: ")
            ]
    assert names[:2] == ["message_start", "ping"] and names[-1] == "message_stop"


async def test_tool_input_streams_in_several_json_chunks() -> None:
    turn = Turn([Text("let me look"), ToolCall("bash", LONG_INPUT)])
    async with FakeModel([turn]) as fake, sdk(fake) as client:
        stream = await open_stream(client)
        events = [event async for event in stream]
        async with client.messages.stream(model="m", max_tokens=100, messages=USER) as helper:
            final = await helper.get_final_message()
    partials = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert len([p for p in partials if p]) >= 3
    assert json.loads("".join(partials)) == LONG_INPUT
    tool = final.content[1]
    assert tool.type == "tool_use" and tool.input == LONG_INPUT and tool.id.startswith("toolu_")
    assert final.stop_reason == "tool_use"


async def test_thinking_streams_with_its_signature() -> None:
    turn = Turn([Thinking("first I should think about this carefully"), Text("answer")])
    async with (
        FakeModel([turn]) as fake,
        sdk(fake) as client,
        client.messages.stream(model="m", max_tokens=100, messages=USER) as helper,
    ):
        kinds = [e.delta.type async for e in helper if e.type == "content_block_delta"]
        final = await helper.get_final_message()
    assert kinds.count("thinking_delta") > 1 and kinds.count("signature_delta") == 1
    thinking = final.content[0]
    assert thinking.type == "thinking" and thinking.thinking.startswith("first I should")
    assert thinking.signature


async def test_streamed_and_plain_answers_are_the_same_message() -> None:
    turn = Turn([Thinking("hmm"), Text("ok"), ToolCall("read", {"path": "/a"})])
    async with FakeModel([turn]) as fake, sdk(fake) as client:
        plain = await create(client)
        async with client.messages.stream(model="m", max_tokens=100, messages=USER) as helper:
            streamed = await helper.get_final_message()
    assert streamed.id == plain.id
    assert [b.to_dict() for b in streamed.content] == [b.to_dict() for b in plain.content]
    assert streamed.usage.output_tokens == plain.usage.output_tokens


async def test_the_turn_follows_the_assistant_messages_in_the_request() -> None:
    script = [Turn([ToolCall("bash", {"command": "ls"})]), Turn([Text("second")])]
    async with FakeModel(script) as fake, sdk(fake) as client:
        first = await create(client, messages=conversation(0))
        again = await create(client, messages=conversation(0))  # a re-sent request after a crash
        second = await create(client, messages=conversation(1))
        past_the_end = await create(client, messages=conversation(5))
    assert first.content[0].type == "tool_use" and again.content[0].type == "tool_use"
    assert (first.id, first.content[0].id) == (again.id, again.content[0].id)
    assert second.content[0].type == "text" and second.content[0].text == "second"
    assert past_the_end.content[0].type == "text" and past_the_end.content[0].text == "done"


async def test_a_rule_answers_from_the_request_and_can_override_the_stop_reason() -> None:
    def rule(body: dict[str, Any]) -> Turn:
        return Turn([Text(f"model {body['model']}")], stop_reason="max_tokens")

    async with FakeModel(rule) as fake, sdk(fake) as client:
        message = await create(client, model="x-1")
    assert message.content[0].type == "text" and message.content[0].text == "model x-1"
    assert message.stop_reason == "max_tokens"


async def test_when_asked_answers_requests_carrying_a_text_and_others_by_the_script() -> None:
    summary = Turn([Text("the gist")])
    script = when_asked("Summarise", summary, [Turn([Text("first")])])
    asking = [*conversation(3)[:-1], {"role": "user", "content": "Summarise the above."}]
    async with FakeModel(script) as fake, sdk(fake) as client:
        summarised = await create(client, messages=asking)
        plain = await create(client, messages=conversation(0))
    assert summarised.content[0].type == "text" and summarised.content[0].text == "the gist"
    assert plain.content[0].type == "text" and plain.content[0].text == "first"


async def test_the_default_script_calls_every_tool_then_finishes() -> None:
    tools = [
        {
            "name": "bash",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
        {
            "name": "read",
            "input_schema": {
                "type": "object",
                "properties": {"limit": {"type": "integer", "default": 7}},
            },
        },
    ]
    async with FakeModel() as fake, sdk(fake) as client:
        calls = await create(client, tools=tools)
        uses = [b for b in calls.content if b.type == "tool_use"]
        results = [{"type": "tool_result", "tool_use_id": b.id, "content": "ok"} for b in uses]
        follow_up = [*USER, {"role": "assistant", "content": [b.to_dict() for b in uses]}]
        finished = await create(
            client, tools=tools, messages=[*follow_up, {"role": "user", "content": results}]
        )
        echoed = await create(client, messages=[{"role": "user", "content": "ping"}])
    assert [(b.name, b.input) for b in uses] == [
        ("bash", {"command": "stead"}),
        ("read", {"limit": 7}),
    ]
    assert finished.content[0].type == "text" and finished.content[0].text == "done"
    assert echoed.content[0].type == "text" and echoed.content[0].text == "You said: ping"


async def test_a_repeated_cached_prefix_is_read_from_the_cache() -> None:
    system: list[Any] = [
        {"type": "text", "text": "rules " * 200, "cache_control": {"type": "ephemeral"}}
    ]
    async with FakeModel() as fake, sdk(fake) as client:
        first = await create(client, system=system)
        second = await create(client, system=system, messages=conversation(1))
        count = await client.messages.count_tokens(model="m", messages=USER, system=system)
    assert first.usage.cache_creation_input_tokens and not first.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert count.input_tokens > first.usage.cache_creation_input_tokens


async def test_overloaded_twice_then_an_answer() -> None:
    async with FakeModel(faults=[FaultRule(HttpError(529), times=2)]) as fake, sdk(fake) as client:
        for _ in range(2):
            with pytest.raises(anthropic.APIStatusError) as failed:
                await create(client)
            assert failed.value.status_code == 529
            assert isinstance(failed.value, anthropic.InternalServerError)
            assert failed.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
        answer = await create(client)
    assert answer.content[0].type == "text"


async def test_rate_limits_carry_retry_after_and_the_sdk_retries_them() -> None:
    faults = [FaultRule(HttpError(429)), FaultRule(HttpError(429, retry_after=0.01), times=2)]
    async with FakeModel(faults=faults) as fake:
        async with sdk(fake) as client:
            with pytest.raises(anthropic.RateLimitError) as limited:
                await create(client)
        async with sdk(fake, max_retries=2) as retrying:
            await create(retrying)
    assert limited.value.response.headers["retry-after"] == "1"
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert fake.request_count == 4


async def test_a_server_error_has_the_api_error_body() -> None:
    async with FakeModel(faults=[FaultRule(HttpError(500))]) as fake, sdk(fake) as client:
        with pytest.raises(anthropic.InternalServerError) as failed:
            await create(client)
    assert failed.value.status_code == 500
    assert failed.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    assert failed.value.response.headers["request-id"] == "req_fake_000000"


async def test_a_prompt_over_the_window_gets_the_apis_too_long_answer() -> None:
    long = [{"role": "user", "content": "x" * 4000}]
    async with (
        FakeModel([Turn([Text("ok")])], context_window=500) as fake,
        sdk(fake) as client,
        httpx2.AsyncClient(verify=client_tls()) as http,
    ):
        counted = (await client.messages.count_tokens(model="m", messages=USER)).input_tokens
        assert (await create(client)).content[0].type == "text"
        with pytest.raises(anthropic.BadRequestError) as refused:
            await create(client, messages=long)
        url = f"{fake.openai_url}/chat/completions"
        chat = await http.post(url, json={"model": "g", "messages": long})
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("prompt is too long: 10")
    assert error["message"].endswith(" tokens > 500 maximum") and counted < 500
    assert chat.status_code == 400 and chat.json()["error"]["code"] == "context_length_exceeded"
    assert "maximum context length is 500 tokens" in chat.json()["error"]["message"]


async def test_a_body_over_the_byte_limit_gets_the_apis_request_too_large() -> None:
    large = [{"role": "user", "content": "x" * 4000}]
    async with (
        FakeModel([Turn([Text("ok")])], max_request_bytes=2000) as fake,
        sdk(fake) as client,
    ):
        assert (await create(client)).content[0].type == "text"
        with pytest.raises(anthropic.ContentTooLargeError) as refused:
            await create(client, messages=large)
    assert refused.value.status_code == 413
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "request_too_large"
    assert error["message"] == "Request exceeds the maximum allowed number of bytes."


async def test_an_error_event_inside_a_stream() -> None:
    faults = [FaultRule(StreamError(after_chunks=3), times=2)]
    async with FakeModel(faults=faults) as fake, sdk(fake) as client:
        seen: list[str] = []
        stream = await open_stream(client)
        with pytest.raises(anthropic.APIStatusError) as failed:
            async for event in stream:
                seen.append(event.type)
        with pytest.raises(anthropic.APIStatusError) as plain:  # no stream: an HTTP error
            await create(client)
    assert seen == ["message_start", "content_block_start"]
    assert failed.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert plain.value.status_code == 529


async def test_a_disconnect_mid_stream_raises() -> None:
    faults = [FaultRule(Disconnect(after_chunks=3)), FaultRule(Disconnect(), from_request=1)]
    async with FakeModel(faults=faults) as fake, sdk(fake) as client:
        seen: list[str] = []
        stream = await open_stream(client)
        with pytest.raises(httpx2.RemoteProtocolError):
            async for event in stream:
                seen.append(event.type)
        with pytest.raises(anthropic.APIConnectionError):
            await create(client)
    assert seen == ["message_start", "content_block_start"]


async def test_a_stall_runs_into_the_client_timeout() -> None:
    faults = [FaultRule(Stall(after_chunks=1)), FaultRule(Stall(), from_request=1)]
    async with FakeModel(faults=faults) as fake, sdk(fake, timeout=IMPATIENT) as client:
        stream = await open_stream(client)
        with pytest.raises(httpx2.ReadTimeout):
            async for _ in stream:
                pass
        with pytest.raises(anthropic.APITimeoutError):
            await create(client)
        answer = await create(client)  # the fault is used up
    assert answer.stop_reason == "end_turn"


async def test_stop_ends_a_stalled_stream_promptly() -> None:
    fake = FakeModel(faults=[FaultRule(Stall(seconds=300))])
    async with fake, sdk(fake, timeout=60.0) as client:
        stream = await open_stream(client)  # headers arrived; the body stalls
        # The stall lasts longer than the test's own timeout, so only `stop` can end it.
        await anyio.to_thread.run_sync(fake.stop)
        with pytest.raises(httpx2.RemoteProtocolError):
            async for _ in stream:
                pass


async def test_delays_before_the_answer_and_between_chunks() -> None:
    faults = [
        FaultRule(Delay(5)),
        FaultRule(Delay(0.2), from_request=1),
        FaultRule(ChunkDelay(0.02), from_request=1),
    ]
    async with FakeModel([Turn([Text("x" * 64)])], faults=faults) as fake:
        async with sdk(fake, timeout=IMPATIENT) as impatient:
            with pytest.raises(anthropic.APITimeoutError):
                await create(impatient)
        async with sdk(fake) as client:
            started = time.monotonic()
            stream = await open_stream(client)
            count = len([event async for event in stream])
            took = time.monotonic() - started
    assert took >= 0.2 + 0.02 * (count - 1)


async def test_faults_by_ordinal_and_by_predicate() -> None:
    def is_haiku(request: ReceivedRequest) -> bool:
        return bool(request.body.get("model") == "haiku")

    faults = [
        FaultRule(HttpError(500), from_request=1),
        FaultRule(HttpError(400, "no haiku"), when=is_haiku, times=None),
    ]
    async with FakeModel(faults=faults) as fake, sdk(fake) as client:
        await create(client)
        with pytest.raises(anthropic.InternalServerError):
            await create(client)
        await create(client)
        for _ in range(2):
            with pytest.raises(anthropic.BadRequestError, match="no haiku"):
                await create(client, model="haiku")
        fake.add_fault(FaultRule(HttpError(503)))
        with pytest.raises(anthropic.InternalServerError):
            await create(client)


async def test_requests_are_recorded_with_their_keys() -> None:
    async with FakeModel() as fake, sdk(fake) as client:
        headers = {"idempotency-key": "idem-1", "x-stead-op-key": "op-1"}
        await create(client, extra_headers=headers)
        with anyio.fail_after(5):
            received = await fake.wait_for_requests_async(1)
    (request,) = received
    assert (request.method, request.path, request.ordinal) == ("POST", "/v1/messages", 0)
    assert (request.idempotency_key, request.op_key) == ("idem-1", "op-1")
    assert request.body["messages"] == USER and not request.stream
    with pytest.raises(TimeoutError):
        fake.wait_for_requests(2, timeout=0.05)


async def test_malformed_requests_and_script_errors_get_error_bodies() -> None:
    def broken(body: dict[str, Any]) -> Turn:
        raise ValueError("bad script")

    async with FakeModel(broken) as fake, sdk(fake) as client:
        with pytest.raises(anthropic.BadRequestError, match="max_tokens"):
            await client.post("/v1/messages", body={"model": "m", "messages": USER}, cast_to=object)
        with pytest.raises(anthropic.InternalServerError, match="bad script"):
            await create(client)
        with pytest.raises(anthropic.NotFoundError):
            await client.get("/v1/elsewhere", cast_to=object)
    assert [str(e) for e in fake.script_errors] == ["bad script"]


async def test_openai_streaming_carries_text_and_tool_call_deltas() -> None:
    turn = Turn([Text("checking the files"), ToolCall("bash", LONG_INPUT)])
    body = {
        "model": "gpt-x",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with (
        FakeModel([turn]) as fake,
        httpx2.AsyncClient(verify=client_tls()) as http,
        http.stream("POST", f"{fake.openai_url}/chat/completions", json=body) as response,
    ):
        data = [line[6:] async for line in response.aiter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert "".join(d.get("content") or "" for d in deltas) == "checking the files"
    assert calls[0]["id"].startswith("call_") and calls[0]["function"]["name"] == "bash"
    arguments = [c["function"]["arguments"] for c in calls[1:]]
    assert len(arguments) >= 3 and json.loads("".join(arguments)) == LONG_INPUT
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["usage"]["total_tokens"] > 0


async def test_openai_plain_answer_and_error_body() -> None:
    script = [Turn([ToolCall("read", {"path": "/a"})]), Turn([Text("fine")])]
    faults = [FaultRule(HttpError(529), from_request=1)]
    assistant = {"role": "assistant", "content": None}
    async with (
        FakeModel(script, faults=faults) as fake,
        httpx2.AsyncClient(verify=client_tls()) as http,
    ):
        url = f"{fake.openai_url}/chat/completions"
        first = (await http.post(url, json={"model": "g", "messages": USER})).json()
        failed = await http.post(url, json={"model": "g", "messages": USER})
        later = {"model": "g", "messages": [*USER, assistant, {"role": "tool", "content": "x"}]}
        second = (await http.post(url, json=later)).json()
    message = first["choices"][0]["message"]
    assert message["content"] is None and first["choices"][0]["finish_reason"] == "tool_calls"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"path": "/a"}
    assert failed.status_code == 529 and failed.json()["error"]["type"] == "overloaded_error"
    assert second["choices"][0]["message"]["content"] == "fine"


def test_sync_use_and_lifecycle_rules() -> None:
    fake = FakeModel([Turn([Text("hi")])])
    with pytest.raises(RuntimeError):
        _ = fake.url
    with fake:
        body = {"model": "m", "max_tokens": 5, "messages": USER}
        reply = httpx2.post(
            f"{fake.url}/v1/messages?beta=true", json=body, timeout=5, verify=client_tls()
        ).json()
        assert reply["content"] == [{"type": "text", "text": "hi"}]
        (request,) = fake.wait_for_requests(1)
        assert (request.path, request.query) == ("/v1/messages", "beta=true")
    with pytest.raises(RuntimeError):
        fake.start()
    with pytest.raises(ValueError):
        Stall(seconds=301)


async def test_the_beta_messages_endpoint_is_answered_too() -> None:
    async with FakeModel([Turn([Text("beta")])]) as fake, sdk(fake) as client:
        message = await client.beta.messages.create(model="m", max_tokens=5, messages=USER)
    assert message.content[0].type == "text" and message.content[0].text == "beta"
    assert fake.requests[0].path == "/v1/messages"


def test_each_request_gets_at_most_one_ending_and_rules_count_down() -> None:
    book = FaultBook(
        [
            FaultRule(Delay(0.5), times=None),
            FaultRule(HttpError(529), times=1),
            FaultRule(Disconnect(), times=1),
            FaultRule(ChunkDelay(0.1), from_request=1, times=1),
        ]
    )
    plans = [book.plan_for(_received(i)) for i in range(3)]
    assert [p.ending for p in plans] == [HttpError(529), Disconnect(), None]
    assert [p.delay for p in plans] == [0.5, 0.5, 0.5]
    assert [p.chunk_delay for p in plans] == [0.0, 0.1, 0.0]


def _received(ordinal: int) -> ReceivedRequest:
    return ReceivedRequest(ordinal, "POST", "/v1/messages", "", {}, {})
