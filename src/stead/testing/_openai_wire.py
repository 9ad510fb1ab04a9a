"""The OpenAI chat-completions dialect of the fake model: the same script turns
as ``chat.completion`` objects or ``chat.completion.chunk`` streams ending in
``data: [DONE]``. Tool calls become ``tool_calls``; thinking becomes
``reasoning_content``, as OpenAI-compatible reasoning servers send it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from stead.testing._wire import (
    JsonReply,
    Reply,
    StreamReply,
    Texts,
    derived_id,
    pieces,
    sse_frame,
    tokens_for,
)
from stead.testing.scripts import StopReason, Text, Thinking, ToolCall, Turn

_FINISH_REASONS: dict[StopReason, str] = {
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}
_MIN_ARGUMENT_CHUNKS = 3


class OpenAIDialect:
    def __init__(self, chunk_chars: int) -> None:
        self._chunk_chars = chunk_chars
        self._texts = Texts()

    def invalid(self, body: dict[str, Any]) -> str | None:
        if not isinstance(body.get("model"), str):
            return "model: field required"
        messages = body.get("messages")
        return None if isinstance(messages, list) and messages else "messages: field required"

    def answer(self, turn: Turn, body: dict[str, Any]) -> Reply:
        completion = self.completion(turn, body)
        if body.get("stream") is not True:
            return JsonReply(completion)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        frames = stream_frames(completion, self._chunk_chars, include_usage=include_usage)
        return StreamReply(tuple(frames))

    def completion(self, turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
        digest = self._texts.request_digest(body)
        message = _message(turn, digest)
        prompt = self.prompt_tokens(body)
        completion = tokens_for(_generated_text(message))
        if turn.usage:
            prompt = turn.usage.get("input_tokens", prompt)
            completion = turn.usage.get("output_tokens", completion)
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": _FINISH_REASONS.get(turn.effective_stop_reason, "stop"),
            "logprobs": None,
        }
        return {
            "id": derived_id("chatcmpl-", digest),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    def error_body(self, error_type: str, message: str, request_id: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": error_type, "param": None, "code": None}}

    def error_chunk(self, error_type: str, message: str, request_id: str) -> bytes:
        return sse_frame(self.error_body(error_type, message, request_id))

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        return tokens_for([body.get("messages"), body.get("tools")])

    def too_long(self, counted: int, window: int, request_id: str) -> JsonReply:
        # OpenAI's own wording and code; vLLM and others answer much the same.
        message = (
            f"This model's maximum context length is {window} tokens. However, your "
            f"messages resulted in {counted} tokens. Please reduce the length of the messages."
        )
        error = {
            "message": message,
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        return JsonReply({"error": error}, 400)


def _message(turn: Turn, digest: str) -> dict[str, Any]:
    texts = [b.text for b in turn.blocks if isinstance(b, Text)]
    calls = [
        _tool_call(block, digest, k)
        for k, block in enumerate(turn.blocks)
        if isinstance(block, ToolCall)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if not calls and message["content"] is None:
        message["content"] = ""  # OpenAI sends null content only beside tool calls
    if calls:
        message["tool_calls"] = calls
    reasoning = "".join(b.thinking for b in turn.blocks if isinstance(b, Thinking))
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def _generated_text(message: dict[str, Any]) -> str:
    calls = [
        c["function"]["name"] + c["function"]["arguments"] for c in message.get("tool_calls", [])
    ]
    return "".join([message.get("reasoning_content", ""), message["content"] or "", *calls])


def _tool_call(block: ToolCall, digest: str, position: int) -> dict[str, Any]:
    arguments = json.dumps(block.sent_input())
    return {
        # An id given as "" is sent so, as some servers send it.
        "id": derived_id("call_", digest, position) if block.id is None else block.id,
        "type": "function",
        "function": {"name": block.name, "arguments": arguments},
    }


def stream_frames(
    completion: dict[str, Any], chunk_chars: int, *, include_usage: bool
) -> Iterator[bytes]:
    """The ``data:`` frames that carry ``completion``, then ``[DONE]``."""
    base = {k: completion[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]
        return sse_frame({**base, "choices": choices})

    yield chunk({"role": "assistant", "content": ""})
    for delta in _deltas(choice["message"], chunk_chars):
        yield chunk(delta)
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield sse_frame({**base, "choices": [], "usage": completion["usage"]})
    yield sse_frame("[DONE]")


def _deltas(message: dict[str, Any], size: int) -> Iterator[dict[str, Any]]:
    for part in pieces(message.get("reasoning_content") or "", size):
        yield {"reasoning_content": part}
    for part in pieces(message.get("content") or "", size):
        yield {"content": part}
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        opening = {"index": index, **call, "function": {"name": function["name"], "arguments": ""}}
        yield {"tool_calls": [opening]}
        for part in pieces(function["arguments"], size, at_least=_MIN_ARGUMENT_CHUNKS):
            yield {"tool_calls": [{"index": index, "function": {"arguments": part}}]}
