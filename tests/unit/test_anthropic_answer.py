"""AnswerBuilder finishes a streamed answer (decoded JSON events) exactly as the
SDK's own accumulator finishes the same events parsed into its types."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter

from stead.harness.providers.anthropic_answer import AnswerBuilder, MalformedStream

Json = dict[str, Any]
EVENTS: TypeAdapter[RawMessageStreamEvent] = TypeAdapter(RawMessageStreamEvent)


def start(usage: Json) -> Json:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return {"type": "message_start", "message": message}


def block(index: int, content_block: Json, *deltas: Json) -> list[Json]:
    return [
        {"type": "content_block_start", "index": index, "content_block": content_block},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def pieces(value: Json, n: int) -> list[Json]:
    text = json.dumps(value)
    size = -(-len(text) // n)
    return [
        {"type": "input_json_delta", "partial_json": text[i : i + size]}
        for i in range(0, len(text), size)
    ]


CITATION = {
    "type": "char_location",
    "cited_text": "sky",
    "document_index": 0,
    "document_title": None,
    "start_char_index": 0,
    "end_char_index": 3,
}
TEXT = block(
    0,
    {"type": "text", "text": "", "citations": None},
    {"type": "text_delta", "text": "The sky "},
    {"type": "citations_delta", "citation": CITATION},
    {"type": "text_delta", "text": "is blue."},
)
THINKING = block(
    1,
    {"type": "thinking", "thinking": "", "signature": ""},
    {"type": "thinking_delta", "thinking": "Let me "},
    {"type": "thinking_delta", "thinking": "think."},
    {"type": "signature_delta", "signature": "c2lnbmVk"},
)
REDACTED = block(2, {"type": "redacted_thinking", "data": "b3BhcXVl"})
TOOL = block(
    3,
    {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}},
    *pieces({"command": "ls -la", "n": [1, 2.5, None, True]}, 4),
)
SERVER_TOOL = block(
    4,
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
    *pieces({"query": "weather"}, 3),
)
NO_INPUT = block(5, {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}})


def delta(stop_reason: str, usage: Json) -> Json:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": usage,
    }


STREAMS = {
    "every block": [
        start(
            {
                "input_tokens": 10,
                "output_tokens": 1,
                "cache_creation_input_tokens": 4,
                "cache_creation": {"ephemeral_1h_input_tokens": 3, "ephemeral_5m_input_tokens": 1},
            }
        ),
        *TEXT,
        *THINKING,
        *REDACTED,
        *TOOL,
        *SERVER_TOOL,
        *NO_INPUT,
        delta("tool_use", {"output_tokens": 40, "cache_read_input_tokens": 7}),
        {"type": "message_stop"},
    ],
    "input cut short": [
        start({"input_tokens": 5, "output_tokens": 1}),
        *block(
            0,
            {"type": "tool_use", "id": "toolu_3", "name": "write", "input": {}},
            {"type": "input_json_delta", "partial_json": '{"path": "a.txt", "content": "hal'},
        )[:-1],
        delta("max_tokens", {"output_tokens": 9, "input_tokens": 6}),
        {"type": "message_stop"},
    ],
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_the_answer_is_the_sdk_accumulators_final_message(name: str) -> None:
    builder = AnswerBuilder()
    snapshot: Any = None
    buffers: dict[int, bytes] = {}
    for raw in STREAMS[name]:
        builder.add(json.loads(json.dumps(raw)))
        event = EVENTS.validate_python(raw)
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)
    expected = [b.model_dump(mode="json", exclude_none=True) for b in snapshot.content]
    assert builder.content() == expected
    assert builder.stop_reason == snapshot.stop_reason
    usage = snapshot.usage
    assert builder.usage() == {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens or 0,
        "cache_read_input_tokens": usage.cache_read_input_tokens or 0,
        "ephemeral_1h_input_tokens": (
            usage.cache_creation.ephemeral_1h_input_tokens if usage.cache_creation else 0
        ),
    }


def test_a_stream_must_begin_with_message_start() -> None:
    builder = AnswerBuilder()
    with pytest.raises(MalformedStream, match="message_start"):
        builder.add(TEXT[0])
    with pytest.raises(MalformedStream, match="message_start"):
        AnswerBuilder().content()
    with pytest.raises(MalformedStream, match="not an object: list"):
        AnswerBuilder().add([start({"input_tokens": 1, "output_tokens": 1})])


@pytest.mark.parametrize(
    "event",
    [
        {"type": "content_block_delta", "index": 7, "delta": {"type": "text_delta", "text": "x"}},
        {"type": "content_block_start", "index": 0},
        {"type": "message_delta", "usage": {"output_tokens": 3}},
        {"type": "content_block_delta", "index": 0, "delta": "text"},
    ],
)
def test_an_event_that_cannot_belong_to_the_answer_is_malformed(event: Json) -> None:
    builder = AnswerBuilder()
    builder.add(start({"input_tokens": 1, "output_tokens": 1}))
    with pytest.raises(MalformedStream, match=event["type"]):
        builder.add(event)


def test_a_stream_that_ends_before_message_stop_is_no_answer() -> None:
    """Cut short but cleanly ended (a body closed early): its text stops
    midway and its tool call's input may read as another command, so it is
    an unreadable stream (tried again), never an answer that runs."""
    builder = AnswerBuilder()
    for raw in STREAMS["every block"][:-1]:
        builder.add(raw)
    with pytest.raises(MalformedStream, match="message_stop"):
        builder.content()


def test_a_message_delta_without_usage_keeps_what_the_start_said() -> None:
    builder = AnswerBuilder()
    for raw in [start({"input_tokens": 5, "output_tokens": 2}), *TEXT]:
        builder.add(raw)
    builder.add({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
    builder.add({"type": "message_stop"})
    assert builder.content()[0]["text"] == "The sky is blue."
    assert builder.usage()["output_tokens"] == 2


def test_a_long_answer_in_many_pieces_is_put_together_whole() -> None:
    """A mebibyte of text in 16-byte deltas (and a tool input in as many):
    joined once at the end, where adding each piece to the string made the
    work grow with the square of the answer and froze the event loop."""
    text = "".join(f"{i:015d}\n" for i in range(65536))
    command = {"command": text}
    builder = AnswerBuilder()
    builder.add(start({"input_tokens": 1, "output_tokens": 1}))
    for raw in block(
        0,
        {"type": "text", "text": ""},
        *({"type": "text_delta", "text": text[i : i + 16]} for i in range(0, len(text), 16)),
    ):
        builder.add(raw)
    for raw in block(
        1,
        {"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {}},
        *pieces(command, 65536),
    ):
        builder.add(raw)
    builder.add(delta("tool_use", {"output_tokens": 9}))
    builder.add({"type": "message_stop"})
    content = builder.content()
    assert content[0]["text"] == text and content[1]["input"] == command


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "text_delta", "text": {"not": "text"}},
        {"type": "thinking_delta", "thinking": 7},
    ],
)
def test_a_delta_of_the_wrong_kind_is_malformed(bad: Json) -> None:
    builder = AnswerBuilder()
    builder.add(start({"input_tokens": 1, "output_tokens": 1}))
    kind = "thinking" if bad["type"] == "thinking_delta" else "text"
    builder.add(
        {"type": "content_block_start", "index": 0, "content_block": {"type": kind, kind: ""}}
    )
    with pytest.raises(MalformedStream, match="not a string"):
        builder.add({"type": "content_block_delta", "index": 0, "delta": bad})
