"""The result of one tool call as the model will see it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    content: list[dict[str, Any]]
    """Messages API ``tool_result`` content blocks (text, image, document).
    Text blocks are never empty (the API refuses empty text blocks)."""
    is_error: bool = False

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolOutcome:
        return cls([{"type": "text", "text": text or "(no output)"}], is_error)

    @classmethod
    def error(cls, message: str) -> ToolOutcome:
        return cls.text(message, is_error=True)
