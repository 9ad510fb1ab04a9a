"""The Anthropic provider over real HTTP against the fake model: the answer it
reads is the one the official SDK reads from the same upstream, it sends what
the SDK sends, each fault becomes the right ``UpstreamError``, and the SDK is
never loaded for it."""

from __future__ import annotations

import json
import sys
from typing import Any

import anthropic
import anyio
import pytest

from stead.config import Settings
from stead.harness import (
    AnthropicModel,
    ModelRequest,
    ModelResponse,
    OpenAICompatibleModel,
    UpstreamError,
)
from stead.harness.providers.anthropic import status_error
from stead.runtime.models import ModelRouter
from stead.runtime.opkeys import op_key, op_key_of
from stead.testing import (
    Delay,
    Disconnect,
    FakeModel,
    FaultRule,
    HttpError,
    Stall,
    StreamError,
    Text,
    Thinking,
    ToolCall,
    Turn,
)

pytestmark = pytest.mark.anyio

USER: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
REQUEST = ModelRequest(model="claude-test", system=None, tools=[], messages=USER, max_tokens=100)
TURN = Turn(
    [
        Thinking("first I should think about this"),
        Text("let me look, with a longer text"),
        ToolCall("bash", {"command": "ls -la", "timeout": None, "flags": ["-i", 2.5]}),
    ]
)


def model(fake: FakeModel, read_timeout: float = 10.0) -> AnthropicModel:
    return AnthropicModel(
        base_url=fake.url, api_key="key-1", read_timeout=read_timeout, total_timeout=30.0
    )


async def complete(fake: FakeModel, **options: Any) -> ModelResponse:
    client = model(fake, **options)
    try:
        return await client.complete(REQUEST, op_key="op-1")
    finally:
        await client.aclose()


async def failure(fake: FakeModel, **options: Any) -> UpstreamError:
    with pytest.raises(UpstreamError) as failed:
        await complete(fake, **options)
    return failed.value


async def test_the_answer_is_the_one_the_sdk_reads_and_the_request_is_the_sdks() -> None:
    async with FakeModel([TURN, TURN]) as fake:
        answer = await complete(fake)
        async with (
            anthropic.AsyncAnthropic(base_url=fake.url, api_key="key-1", max_retries=0) as sdk,
            sdk.messages.stream(**REQUEST.as_params()) as stream,
        ):
            final = await stream.get_final_message()
        with anyio.fail_after(10):
            ours, theirs = await fake.wait_for_requests_async(2)
    assert answer.content == [b.model_dump(mode="json", exclude_none=True) for b in final.content]
    assert answer.content[2]["input"]["timeout"] is None  # the model's null stays a value
    assert answer.stop_reason == final.stop_reason == "tool_use"
    assert answer.usage["output_tokens"] == final.usage.output_tokens
    assert ours.body == {**theirs.body, "stream": True} and ours.path == theirs.path
    for name in ("authorization", "anthropic-version", "content-type"):
        assert ours.headers[name] == theirs.headers[name]
    assert ours.idempotency_key == "op-1"


@pytest.mark.parametrize(
    ("fault", "status", "retryable", "error_type"),
    [
        (HttpError(529), 529, True, "model_overloaded_error"),
        (HttpError(429, retry_after=7), 429, True, "model_rate_limited_error"),
        (HttpError(400, message="max_tokens: too large"), 400, False, "model_request_failed_error"),
        (HttpError(500), 500, True, "model_request_failed_error"),
        (StreamError(after_chunks=3), 529, True, "model_overloaded_error"),
        # Placed by its type: a request the API refused is refused again.
        (StreamError(after_chunks=2, error_type="invalid_request_error"), 400, False, None),
        (StreamError(after_chunks=2, error_type="api_error"), 500, True, None),
    ],
)
async def test_an_error_answer_is_placed_by_its_status_and_type(
    fault: Any, status: int, retryable: bool, error_type: str | None
) -> None:
    async with FakeModel([TURN], faults=[FaultRule(fault)]) as fake:
        error = await failure(fake)
    assert (error.status, error.retryable) == (status, retryable)
    assert error.error_type == (error_type or "model_request_failed_error")
    assert str(error).startswith(f"upstream answered {status}")
    if isinstance(fault, HttpError) and fault.message:
        assert fault.message in str(error)
    if isinstance(fault, HttpError) and fault.status == 429:
        assert error.retry_after == 7


async def test_a_request_longer_than_the_window_is_told_apart_with_the_models_count() -> None:
    """Only the model's refusal of a prompt over its window says compacting may
    help; its count, where it gives one, is the size of the context."""
    async with FakeModel([TURN, TURN], context_window=5) as fake:
        refused = await failure(fake)
        client = OpenAICompatibleModel(
            base_url=fake.openai_url, api_key="k", read_timeout=10.0, total_timeout=30.0
        )
        with pytest.raises(UpstreamError) as chat:
            await client.complete(REQUEST, op_key="op-1")
        await client.aclose()
    for error in (refused, chat.value):
        assert error.too_long and (error.status, error.retryable) == (400, False)
        assert error.counted is not None and error.counted > 5
    assert "prompt is too long" in str(refused)
    unsaid = HttpError(400, message="prompt is too long")
    other = HttpError(400, message="max_tokens: too large")
    async with FakeModel([TURN], faults=[FaultRule(unsaid), FaultRule(other)]) as fake:
        without_count, not_long = await failure(fake), await failure(fake)
    assert without_count.too_long and without_count.counted is None
    assert not not_long.too_long and not_long.counted is None


async def test_a_request_over_the_apis_byte_limit_is_told_apart() -> None:
    """A 413 (``request_too_large``, the Messages API's 32 MB) says compacting
    may help where the request's media make it so; so does one whose body is
    Cloudflare's page rather than the API's JSON, as it comes before the API."""
    async with FakeModel([TURN], max_request_bytes=50) as fake:
        refused = await failure(fake)
        client = OpenAICompatibleModel(
            base_url=fake.openai_url, api_key="k", read_timeout=10.0, total_timeout=30.0
        )
        with pytest.raises(UpstreamError) as chat:
            await client.complete(REQUEST, op_key="op-1")
        await client.aclose()
    page = status_error(413, "<html><center><h1>413 Request Entity Too Large</h1></center>")
    for error in (refused, chat.value, page):
        assert error.too_large and not error.too_long
        assert (error.status, error.retryable) == (413, False)
    assert "request_too_large" in str(refused)


async def test_an_error_that_echoes_the_api_key_does_not_carry_it_on() -> None:
    """The session's events and the log show the error's message: an upstream
    that repeats the key it was sent must not put the key there."""
    key = "sk-ant-echoed-4711"
    echo = HttpError(401, message=f"invalid x-api-key: Bearer {key}")
    async with FakeModel([TURN], faults=[FaultRule(echo)]) as fake:
        settings = Settings(anthropic_api_key=key, upstream_base_url=fake.url)
        router = ModelRouter(settings)
        with pytest.raises(UpstreamError) as failed:
            await router.client_for("claude-sonnet-4-6").complete(REQUEST, op_key="op-1")
        await router.aclose()
    assert key not in str(failed.value)
    assert str(failed.value).endswith("invalid x-api-key: Bearer [redacted]")
    assert (failed.value.status, failed.value.retryable) == (401, False)


@pytest.mark.parametrize("status", [429, 503])
async def test_an_openai_compatible_server_s_retry_after_is_kept(status: int) -> None:
    # The runtime waits at least this long before asking again (within its cap).
    async with FakeModel([TURN], faults=[FaultRule(HttpError(status, retry_after=7))]) as fake:
        client = OpenAICompatibleModel(
            base_url=fake.openai_url, api_key="k", read_timeout=10.0, total_timeout=30.0
        )
        with pytest.raises(UpstreamError) as failed:
            await client.complete(REQUEST, op_key="op-1")
        await client.aclose()
    assert (failed.value.status, failed.value.retryable) == (status, True)
    assert failed.value.retry_after == 7


async def test_a_broken_or_silent_upstream_is_a_retryable_error() -> None:
    faults = [
        FaultRule(Disconnect(after_chunks=3), times=1),
        FaultRule(Stall(after_chunks=2, seconds=30), times=1, from_request=1),
        FaultRule(Delay(30), times=1, from_request=2),
    ]
    async with FakeModel([TURN], faults=faults) as fake:
        broke = await failure(fake)
        stopped = await failure(fake, read_timeout=0.3)
        silent = await failure(fake, read_timeout=0.3)
    assert broke.retryable and "connection broke" in str(broke)
    assert stopped.retryable and "stopped sending" in str(stopped)
    assert silent.retryable and "timed out" in str(silent)


async def test_an_unreachable_upstream_is_a_retryable_error() -> None:
    client = AnthropicModel(
        base_url="http://127.0.0.1:9", api_key="k", read_timeout=5.0, total_timeout=10.0
    )
    with pytest.raises(UpstreamError, match="connection failed") as failed:
        await client.complete(REQUEST, op_key="op-1")
    await client.aclose()
    assert failed.value.retryable


PROGRAM = """
import json, sys, anyio
from stead.harness import AnthropicModel, ModelRequest
request = ModelRequest(model="m", system=None, tools=[], messages={messages!r}, max_tokens=9)
async def main():
    client = AnthropicModel(base_url={url!r}, api_key="k", read_timeout=10, total_timeout=30)
    answer = await client.complete(request, op_key="op")
    await client.aclose()
    sdk = [name for name in sys.modules if name.partition(".")[0] == "anthropic"]
    print(json.dumps([answer.content[1]["text"], sdk]))
anyio.run(main)
"""


async def test_a_model_call_loads_no_part_of_the_sdk() -> None:
    async with FakeModel([TURN]) as fake:
        program = PROGRAM.format(messages=USER, url=fake.url)
        done = await anyio.run_process([sys.executable, "-c", program], check=False)
    assert done.returncode == 0, done.stderr.decode()
    text, sdk_modules = json.loads(done.stdout)
    assert text.startswith("let me look") and sdk_modules == []


def test_a_model_step_s_op_key_is_the_one_of_its_params() -> None:
    # The body sent is checked against the SDK's above; it is made from the same form.
    request = ModelRequest(
        model="claude-test",
        system=[{"type": "text", "text": "sys"}],
        tools=[{"name": "bash", "input_schema": {"type": "object"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": 'héllo "x"'}]}],
        max_tokens=100,
    )
    assert op_key_of("model", request.canonical_params, "run_1", 3) == op_key(
        "model", request.as_params(), "run_1", 3
    )
