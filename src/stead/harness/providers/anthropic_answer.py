"""An answer put together from the Messages API's stream events, as decoded JSON.

It keeps the blocks the stream announced and applies each delta the way the
SDK's own accumulator does (``anthropic.lib.streaming._messages.
accumulate_event``), so the finished content is the JSON the SDK's final
message dumps to (``model_dump(mode="json", exclude_none=True)``); the SDK's
``messages.stream`` helper would also rebuild a typed snapshot of the whole
message on every event. ``tests/unit/test_anthropic_answer.py`` holds the two
side by side.
"""

from __future__ import annotations

from typing import Any

from jiter import from_json

from stead.harness.model import CALL_BLOCKS, AnswerObserver
from stead.jsonvalues import Json

STREAM_EVENTS = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)
"""The events an answer is made of; others (``ping``, types added later) pass."""
USAGE_TOTALS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
"""Usage a ``message_delta`` may restate (a cumulative total; absent: keep the start's)."""
GROWN = {"text_delta": "text", "thinking_delta": "thinking"}
"""Deltas that add to a field of their block, and the field."""
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""What the deltas of one answer may add up to (a 128k-token answer is about
half a mebibyte)."""


class MalformedStream(ValueError):
    """The events do not make an answer (out of order, or missing a field)."""


def without_none(value: Any) -> Any:
    """``value`` with the ``None`` fields of its objects left out, as the SDK's
    dump of its models leaves them out; a tool's ``input`` is the model's own
    JSON, where a null is a value, and stays whole."""
    if isinstance(value, dict):
        return {
            key: item if key == "input" else without_none(item)
            for key, item in value.items()
            if item is not None
        }
    if isinstance(value, list):
        return [without_none(item) for item in value]
    return value


class AnswerBuilder:
    def __init__(self, observer: AnswerObserver | None = None) -> None:
        self._observer = observer
        self._blocks: list[Json] = []
        self._inputs: dict[int, bytearray] = {}
        self._pieces: dict[tuple[int, str], list[str]] = {}
        """(block, field) -> what the deltas added to it, joined once at the end:
        adding each to the string made an answer's cost grow with its square."""
        self._size = 0
        self.stopped = False
        """``message_stop`` came: the answer is whole."""
        self.stop_reason: str | None = None
        self.stop_details: Json | None = None
        self._usage: dict[str, int | None] = {}
        self._started = False

    def add(self, event: object) -> None:
        """Applies one decoded event; raises ``MalformedStream`` for one that
        cannot belong to the answer so far (or is not a JSON object at all)."""
        if not isinstance(event, dict):
            raise MalformedStream(f"an event that is not an object: {type(event).__name__}")
        kind = event.get("type")
        if not self._started and kind != "message_start":
            raise MalformedStream(f'unexpected event order: {kind} before "message_start"')
        try:
            if kind == "content_block_delta":
                self._delta(event["index"], event["delta"])
            elif kind == "content_block_start":
                self._blocks.append(dict(event["content_block"]))
                if self._observer is not None:
                    self._started_block(len(self._blocks) - 1, self._blocks[-1])
            elif kind == "message_start":
                self._begin(event["message"]["usage"])
            elif kind == "message_delta":
                self.stop_reason = event["delta"].get("stop_reason")
                details = event["delta"].get("stop_details")
                self.stop_details = details if isinstance(details, dict) else None
                usage = event.get("usage") or {}
                for name in ("output_tokens", *USAGE_TOTALS):
                    if usage.get(name) is not None:
                        self._usage[name] = usage[name]
            elif kind == "message_stop":
                self.stopped = True
        except (LookupError, TypeError, AttributeError) as exc:
            raise MalformedStream(f"a {kind} event without {exc!r}") from None

    def _begin(self, usage: Json) -> None:
        self._started = True
        self._usage = {"output_tokens": usage["output_tokens"]}
        self._usage |= {name: usage.get(name) for name in USAGE_TOTALS}
        # The 1-hour share of the cache writes, priced apart (``stead.usage``);
        # only the start says it, as the SDK's own accumulator keeps it.
        split = usage.get("cache_creation") or {}
        self._usage["ephemeral_1h_input_tokens"] = split.get("ephemeral_1h_input_tokens") or 0

    def _started_block(self, index: int, block: Json) -> None:
        assert self._observer is not None
        self._observer.block_started(index, block["type"])
        if block["type"] == "text" and isinstance(block.get("text"), str) and block["text"]:
            self._observer.text_added(index, block["text"])

    def _delta(self, index: int, delta: Json) -> None:
        block = self._blocks[index]
        kind, block_kind = delta["type"], block["type"]
        field = GROWN.get(kind)
        if field is not None and field == block_kind:
            added = delta[field]
            if not isinstance(added, str):
                raise MalformedStream(f"a {kind} whose {field} is not a string")
            self._grow(len(added))
            self._pieces.setdefault((index, field), []).append(added)
            if self._observer is not None and added and field == "text":
                self._observer.text_added(index, added)
        elif kind == "input_json_delta" and block_kind in CALL_BLOCKS:
            piece = delta["partial_json"].encode()
            self._grow(len(piece))
            self._inputs.setdefault(index, bytearray()).extend(piece)
        elif kind == "signature_delta" and block_kind == "thinking":
            block["signature"] = delta["signature"]
        elif kind == "citations_delta" and block_kind == "text":
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]

    def _grow(self, size: int) -> None:
        self._size += size
        if self._size > MAX_ANSWER_BYTES:
            raise MalformedStream(f"an answer over {MAX_ANSWER_BYTES} bytes")

    def content(self) -> list[Json]:
        """The finished blocks as Messages API JSON (None fields left out)."""
        if not self._started:
            raise MalformedStream('the stream ended before "message_start"')
        if not self.stopped:
            # Cut short, an answer is not the model's: its text stops midway and
            # its last tool call's input may read as a different command.
            raise MalformedStream('the stream ended before "message_stop"')
        for (index, field), added in self._pieces.items():
            start = self._blocks[index].get(field) or ""
            if not isinstance(start, str):
                raise MalformedStream(f"a {field} block whose {field} is not a string")
            self._blocks[index][field] = start + "".join(added)
        self._pieces.clear()
        for index, pieces in self._inputs.items():
            if pieces:
                # Parsed once, in the SDK's partial mode: an input cut short
                # (max_tokens mid-call) reads as the SDK would read it.
                self._blocks[index]["input"] = from_json(bytes(pieces), partial_mode=True)
        return [without_none(block) for block in self._blocks]

    def usage(self) -> dict[str, int]:
        order = ("input_tokens", "output_tokens", *USAGE_TOTALS[1:], "ephemeral_1h_input_tokens")
        return {name: self._usage.get(name) or 0 for name in order}
