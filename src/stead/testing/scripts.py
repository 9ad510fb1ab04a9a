"""What the fake model answers: turns of blocks, and the scripts that choose them.

A script is either a list of turns or a rule (a function of the request body).
The turn for a list script is chosen from the request itself, never from a call
counter, so a brain that crashes and re-sends a request gets the same answer.
This module knows nothing of HTTP or wire formats; both dialects read requests
through the small helpers at the bottom.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

StopReason: TypeAlias = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal"
]


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class ToolCall:
    """A tool call; the fake derives ``id`` from the request unless one is given.
    An ``input`` that is no mapping (a model's mistake) is sent as it is."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    def sent_input(self) -> Any:
        """``input`` as the fake sends it: a mapping as a dict, anything else as it is."""
        return dict(self.input) if isinstance(self.input, Mapping) else self.input


@dataclass(frozen=True)
class Thinking:
    """A thinking block; the signature is derived from the text unless given."""

    thinking: str
    signature: str | None = None


Block: TypeAlias = Text | ToolCall | Thinking


@dataclass(frozen=True)
class Turn:
    """One model answer. ``stop_reason`` defaults to ``tool_use`` if it calls a tool.
    ``usage``: token counts the answer reports instead of those the fake works
    out (Anthropic's names: ``input_tokens``, ``output_tokens``,
    ``cache_creation_input_tokens``, ``cache_read_input_tokens``), so a test
    knows exactly what a request used. ``stop_details``: what the answer says of
    its stop (a ``refusal``'s ``category`` and ``explanation``)."""

    blocks: Sequence[Block]
    stop_reason: StopReason | None = None
    usage: Mapping[str, int] | None = None
    stop_details: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # A tuple keeps the frozen turn truly immutable when given a list.
        object.__setattr__(self, "blocks", tuple(self.blocks))

    @property
    def effective_stop_reason(self) -> StopReason:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolCall) for b in self.blocks) else "end_turn"


Rule: TypeAlias = Callable[[dict[str, Any]], Turn]
Script: TypeAlias = Sequence[Turn] | Rule

DONE = Turn([Text("done")])


def choose_turn(script: Script, body: dict[str, Any]) -> Turn:
    """The answer to ``body``: a rule's result, or the list entry at the number of
    assistant messages already in the request (``DONE`` past the end)."""
    if callable(script):
        return script(body)
    index = assistant_turns(body)
    return script[index] if index < len(script) else DONE


def assistant_turns(body: Mapping[str, Any]) -> int:
    """How many assistant messages the request carries (either dialect)."""
    return sum(1 for message in _messages(body) if message.get("role") == "assistant")


def echo(body: dict[str, Any]) -> Turn:
    """A rule that repeats the last user text."""
    return Turn([Text(f"You said: {last_user_text(body)}")])


def when_asked(text: str, turn: Turn, otherwise: Script = echo) -> Rule:
    """A rule that answers ``turn`` to every request whose last user text
    contains ``text`` (stead's summarising request, say: its instruction is
    ``stead.harness.SUMMARY_INSTRUCTION``), and any other request as ``otherwise``."""

    def rule(body: dict[str, Any]) -> Turn:
        if text in last_user_text(body):
            return turn
        return choose_turn(otherwise, body)

    return rule


def call_every_tool(body: dict[str, Any]) -> Turn:
    """A rule that calls every offered tool once, then says ``done``.

    Tool arguments come from each tool's input schema (defaults, enums, or a
    placeholder per type). With no tools it echoes; once the conversation holds
    tool results it ends the turn.
    """
    if has_tool_results(body):
        return DONE
    tools = offered_tools(body)
    if not tools:
        return echo(body)
    return Turn([ToolCall(name, placeholder_input(schema)) for name, schema in tools])


def offered_tools(body: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, input schema) of each tool, in Anthropic or OpenAI shape."""
    found = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, Mapping):
            continue
        if isinstance(tool.get("function"), Mapping):  # OpenAI: {"type": "function", ...}
            spec = tool["function"]
            found.append((str(spec["name"]), spec.get("parameters") or {}))
        elif "name" in tool:
            found.append((str(tool["name"]), tool.get("input_schema") or {}))
    return found


def has_tool_results(body: Mapping[str, Any]) -> bool:
    for message in _messages(body):
        if message.get("role") == "tool":
            return True
        content = message.get("content")
        if isinstance(content, list) and any(_is_block(b, "tool_result") for b in content):
            return True
    return False


def last_user_text(body: Mapping[str, Any]) -> str:
    for message in reversed(_messages(body)):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b["text"] for b in content or [] if _is_block(b, "text") and "text" in b]
        return " ".join(texts)
    return ""


def placeholder_input(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A value for each required property (all properties if none are required)."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    names = schema.get("required") or list(properties)
    return {name: _placeholder(properties.get(name) or {}) for name in names}


def _placeholder(schema: Mapping[str, Any]) -> Any:
    if "default" in schema:
        return schema["default"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):  # e.g. ["string", "null"]: the first non-null type
        kind = next((k for k in kind if k != "null"), None)
    placeholders: dict[str, Any] = {"string": "stead", "integer": 1, "number": 1, "boolean": True}
    if kind == "object":
        return placeholder_input(schema)
    if kind == "array":
        return []
    return placeholders.get(str(kind), "stead")


def _messages(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, Mapping)] if isinstance(messages, list) else []


def _is_block(block: Any, kind: str) -> bool:
    return isinstance(block, Mapping) and block.get("type") == kind
