"""An answer put together from the SDK's raw Messages stream events.

The SDK's ``messages.stream`` helper rebuilds a typed snapshot of the whole
message on every event (and re-parses a tool call's input JSON on every
delta); the harness only needs the finished blocks. This keeps the blocks the
stream announced and applies each delta the way the SDK's own accumulator does
(``anthropic.lib.streaming._messages.accumulate_event``), so the finished
content is the same JSON the helper's final message dumps to; a unit test holds
the two side by side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jiter import from_json

from stead.harness.model import AnswerObserver
from stead.jsonvalues import Json

if TYPE_CHECKING:
    from anthropic.types import RawMessageStreamEvent

TRACKS_INPUT = frozenset({"tool_use", "server_tool_use"})
"""Blocks whose ``input`` arrives as ``input_json_delta`` pieces."""
USAGE_TOTALS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
"""Usage a ``message_delta`` may restate (a cumulative total; absent: keep the start's)."""


class AnswerBuilder:
    def __init__(self, observer: AnswerObserver | None = None) -> None:
        self._observer = observer
        self._blocks: list[Any] = []
        self._inputs: dict[int, bytes] = {}
        self.stop_reason: str | None = None
        self._usage: dict[str, int | None] = {}
        self._started = False

    def add(self, event: RawMessageStreamEvent) -> None:
        if event.type == "content_block_delta":
            self._delta(event.index, event.delta)
        elif event.type == "content_block_start":
            self._blocks.append(event.content_block)
            if self._observer is not None:
                self._started_block(len(self._blocks) - 1, event.content_block)
        elif event.type == "message_start":
            self._started = True
            usage = event.message.usage
            self._usage = {"output_tokens": usage.output_tokens}
            self._usage |= {name: getattr(usage, name) for name in USAGE_TOTALS}
            # The 1-hour share of the cache writes, priced apart (``stead.usage``);
            # only the start says it, as the SDK's own accumulator keeps it.
            split = getattr(usage, "cache_creation", None)
            self._usage["ephemeral_1h_input_tokens"] = (
                split.ephemeral_1h_input_tokens if split is not None else 0
            )
        elif event.type == "message_delta":
            self.stop_reason = event.delta.stop_reason
            self._usage["output_tokens"] = event.usage.output_tokens
            for name in USAGE_TOTALS:
                value = getattr(event.usage, name)
                if value is not None:
                    self._usage[name] = value
        if not self._started:
            raise RuntimeError(f'unexpected event order: {event.type} before "message_start"')

    def _started_block(self, index: int, block: Any) -> None:
        assert self._observer is not None
        self._observer.block_started(index, block.type)
        if block.type == "text" and block.text:
            self._observer.text_added(index, block.text)

    def _delta(self, index: int, delta: Any) -> None:
        block = self._blocks[index]
        kind = delta.type
        if kind == "text_delta" and block.type == "text":
            block.text += delta.text
            if self._observer is not None and delta.text:
                self._observer.text_added(index, delta.text)
        elif kind == "input_json_delta" and block.type in TRACKS_INPUT:
            self._inputs[index] = self._inputs.get(index, b"") + delta.partial_json.encode()
        elif kind == "thinking_delta" and block.type == "thinking":
            block.thinking += delta.thinking
        elif kind == "signature_delta" and block.type == "thinking":
            block.signature = delta.signature
        elif kind == "citations_delta" and block.type == "text":
            block.citations = [*(block.citations or []), delta.citation]

    def content(self) -> list[Json]:
        """The finished blocks as Messages API JSON (None fields left out)."""
        if not self._started:
            raise RuntimeError('the stream ended before "message_start"')
        for index, pieces in self._inputs.items():
            if pieces:
                # Parsed once, in the SDK's partial mode: an input cut short
                # (max_tokens mid-call) reads as the SDK would read it.
                self._blocks[index].input = from_json(pieces, partial_mode=True)
        return [block.model_dump(mode="json", exclude_none=True) for block in self._blocks]

    def usage(self) -> dict[str, int]:
        order = ("input_tokens", "output_tokens", *USAGE_TOTALS[1:], "ephemeral_1h_input_tokens")
        return {name: self._usage.get(name) or 0 for name in order}
