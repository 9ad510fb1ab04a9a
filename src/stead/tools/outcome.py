"""The result of one tool call as the model will see it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from stead.jsonvalues import Json


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    content: list[Json]
    """Messages API ``tool_result`` content blocks (text, image, document).
    Text blocks are never empty (the API refuses empty text blocks)."""
    is_error: bool = False
    session_error: str | None = None
    """Set when the session's sandbox cannot serve it any more and no retry
    will change that (its saved workspace is lost, its packages cannot be
    installed, the machine cannot isolate): the turn ends with a
    ``session.error`` carrying this message instead of going on."""
    terminal: bool = False
    """With ``session_error``: the session itself cannot go on (its saved
    workspace is lost for good), so it is terminated, not only the turn."""
    used: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Usage counters the call adds to its session (``stead.usage.TOOL_COUNTERS``)."""

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolOutcome:
        return cls([{"type": "text", "text": text or "(no output)"}], is_error)

    @classmethod
    def error(cls, message: str) -> ToolOutcome:
        return cls.text(message, is_error=True)
