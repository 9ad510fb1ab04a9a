"""The Anthropic Messages dialect of the fake model: JSON messages, SSE event
streams, error bodies and usage (with prompt-cache reads) exactly as the
official SDK parses them. Knows nothing of HTTP serving or faults.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from stead.media_types import IMAGE_MAX_PIXELS, image_size
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
from stead.testing.scripts import Block, Text, Thinking, Turn

# Tokens the hosted API adds for message framing; keeps input_tokens above 0.
_FRAMING_TOKENS = 3
# The hosted API splits tool input into several partial JSON chunks; so does the fake.
_MIN_JSON_CHUNKS = 3


class AnthropicDialect:
    def __init__(self, chunk_chars: int) -> None:
        self._chunk_chars = chunk_chars
        self._texts = Texts()
        self._cache = PromptCache(self._texts)

    def invalid(self, body: dict[str, Any]) -> str | None:
        for name, kind in (("model", str), ("max_tokens", int), ("messages", list)):
            if not isinstance(body.get(name), kind):
                return f"{name}: Field required"
        if not body["messages"]:
            return "messages: at least one message is required"
        return next(filter(None, map(_invalid_message, body["messages"])), None)

    def answer(self, turn: Turn, body: dict[str, Any]) -> Reply:
        message = self.message(turn, body)
        if body.get("stream") is True:
            return StreamReply(tuple(stream_frames(message, self._chunk_chars)))
        return JsonReply(message)

    def count_tokens(self, body: dict[str, Any]) -> JsonReply:
        return JsonReply({"input_tokens": self.prompt_tokens(body)})

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        total = sum(tokens_for(text) for _, text in _segments(body, self._texts))
        return total + _FRAMING_TOKENS

    def too_long(self, counted: int, window: int, request_id: str) -> JsonReply:
        message = f"prompt is too long: {counted} tokens > {window} maximum"
        return JsonReply(self.error_body("invalid_request_error", message, request_id), 400)

    def message(self, turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
        digest = self._texts.request_digest(body)
        content = [_content_block(block, digest, k) for k, block in enumerate(turn.blocks)]
        output_tokens = sum(tokens_for(_visible(block)) for block in content)
        return {
            "id": derived_id("msg_", digest),
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": turn.effective_stop_reason,
            "stop_sequence": None,
            "stop_details": dict(turn.stop_details) if turn.stop_details else None,
            "usage": {**self._cache.usage(body, output_tokens), **(turn.usage or {})},
        }

    def error_body(self, error_type: str, message: str, request_id: str) -> dict[str, Any]:
        error = {"type": error_type, "message": message}
        return {"type": "error", "error": error, "request_id": request_id}

    def error_chunk(self, error_type: str, message: str, request_id: str) -> bytes:
        return sse_frame(self.error_body(error_type, message, request_id), "error")


class PromptCache:
    """The prompt prefixes this server has seen at ``cache_control`` breakpoints.

    A request reads from the cache the longest prefix seen before and writes
    the rest up to its last breakpoint, as the hosted API reports it.
    """

    def __init__(self, texts: Texts) -> None:
        self._lock = threading.Lock()  # dialects are shared by all requests
        self._seen: set[str] = set()
        self._texts = texts

    def usage(self, body: dict[str, Any], output_tokens: int) -> dict[str, Any]:
        segments = _segments(body, self._texts)
        texts = [text for _, text in segments]
        sizes = [tokens_for(text) for text in texts]
        marks = [i for i, (marked, _) in enumerate(segments) if marked]
        if body.get("cache_control") and segments:  # automatic caching: up to the end
            marks.append(len(segments) - 1)
        cached = read = 0
        if marks:
            digests = list(_prefix_digests(texts))
            last = max(marks)
            with self._lock:
                hit = max((i for i in range(last + 1) if digests[i] in self._seen), default=-1)
                self._seen.update(digests[i] for i in marks)
            cached, read = sum(sizes[: last + 1]), sum(sizes[: hit + 1])
        return {
            "input_tokens": sum(sizes) - cached + _FRAMING_TOKENS,
            "cache_creation_input_tokens": cached - read,
            "cache_read_input_tokens": read,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        }


def stream_frames(message: dict[str, Any], chunk_chars: int) -> Iterator[bytes]:
    """The SSE events that carry ``message``, in the hosted API's order."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield sse_frame({"type": "message_start", "message": start}, "message_start")
    yield sse_frame({"type": "ping"}, "ping")
    for index, block in enumerate(message["content"]):
        yield from _block_frames(index, block, chunk_chars)
    delta = {
        "stop_reason": message["stop_reason"],
        "stop_sequence": None,
        "stop_details": message["stop_details"],
    }
    final_usage = {k: v for k, v in usage.items() if k != "service_tier"}
    yield sse_frame(
        {"type": "message_delta", "delta": delta, "usage": final_usage}, "message_delta"
    )
    yield sse_frame({"type": "message_stop"}, "message_stop")


def _block_frames(index: int, block: dict[str, Any], size: int) -> Iterator[bytes]:
    yield _frame("content_block_start", index=index, content_block=_opening(block))
    for delta in _deltas(block, size):
        yield _frame("content_block_delta", index=index, delta=delta)
    yield _frame("content_block_stop", index=index)


def _opening(block: dict[str, Any]) -> dict[str, Any]:
    if block["type"] == "text":
        return {"type": "text", "text": ""}
    if block["type"] == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}
    return {**block, "input": {}}


def _deltas(block: dict[str, Any], size: int) -> list[dict[str, Any]]:
    if block["type"] == "text":
        return [{"type": "text_delta", "text": p} for p in pieces(block["text"], size)]
    if block["type"] == "thinking":
        parts = pieces(block["thinking"], size)
        thinking = [{"type": "thinking_delta", "thinking": p} for p in parts]
        return [*thinking, {"type": "signature_delta", "signature": block["signature"]}]
    # The hosted API opens tool input with an empty chunk, then splits the JSON.
    parts = ["", *pieces(json.dumps(block["input"]), size, at_least=_MIN_JSON_CHUNKS)]
    return [{"type": "input_json_delta", "partial_json": p} for p in parts]


def _frame(event: str, **fields: Any) -> bytes:
    return sse_frame({"type": event, **fields}, event)


def _content_block(block: Block, digest: str, position: int) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Thinking):
        signature = block.signature or derived_id("sig_", digest, position)
        return {"type": "thinking", "thinking": block.thinking, "signature": signature}
    tool_id = block.id or derived_id("toolu_", digest, position)
    return {"type": "tool_use", "id": tool_id, "name": block.name, "input": block.sent_input()}


def _invalid_message(message: Any) -> str | None:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        return "messages: each message needs a role, user or assistant"
    if not isinstance(message.get("content"), str | list):
        return "messages: each message needs content, a string or a list of blocks"
    if any(_too_large(image) for image in _images(message["content"])):
        return f"image dimensions exceed max allowed size: {IMAGE_MAX_PIXELS} pixels"
    return None


def _images(content: Any) -> Iterator[dict[str, Any]]:
    """The image blocks of a message's content, tool results' included."""
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and block.get("type") == "image":
            yield block
        elif isinstance(block, dict) and block.get("type") == "tool_result":
            yield from _images(block.get("content"))


def _too_large(image: dict[str, Any]) -> bool:
    source = image.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        return False
    try:
        size = image_size(base64.b64decode(str(source.get("data"))))
    except ValueError:
        return False
    return size is not None and max(size) > IMAGE_MAX_PIXELS


def _visible(block: dict[str, Any]) -> Any:
    return block.get("text") or block.get("thinking") or [block.get("name"), block.get("input")]


def _segments(body: dict[str, Any], texts: Texts) -> list[tuple[bool, str]]:
    """The prompt in cache order (tools, system, messages) as (breakpoint?, the
    canonical text of ``[role, block]``) pairs; ``cache_control`` itself is left
    out so moving a breakpoint keeps the prefix the same, as on the hosted API."""
    system = body.get("system")
    system_blocks = [system] if isinstance(system, str) else system or []
    found = [_segment("tool", tool, texts) for tool in body.get("tools") or []]
    found += [_segment("system", block, texts) for block in system_blocks]
    for message in body.get("messages") or []:
        content = message["content"]  # messages are checked by ``invalid``
        blocks = content if isinstance(content, list) else [content]
        found += [_segment(message.get("role"), block, texts) for block in blocks]
    return found


def _segment(role: Any, block: Any, texts: Texts) -> tuple[bool, str]:
    if isinstance(block, dict) and "cache_control" in block:
        rest = {k: v for k, v in block.items() if k != "cache_control"}
        return True, texts.canonical([role, rest])
    return False, texts.canonical([role, block])


def _prefix_digests(texts: Sequence[str]) -> Iterator[str]:
    running = hashlib.sha256()
    for text in texts:
        running.update(text.encode())
        yield running.hexdigest()
