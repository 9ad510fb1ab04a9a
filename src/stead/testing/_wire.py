"""What both wire dialects of the fake model share: replies, ids, token estimates.

Ids and token counts are derived from the request, so the same request always
gets the same message and tool-call ids (a re-sent request after a crash looks
exactly like the first answer).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from stead.testing.scripts import Turn

# Request fields that change how an answer is delivered, not what it is.
_DELIVERY_FIELDS = ("stream", "stream_options")


@dataclass(frozen=True)
class JsonReply:
    body: dict[str, Any]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode()


@dataclass(frozen=True)
class StreamReply:
    """A complete server-sent-event stream, one frame per chunk."""

    chunks: tuple[bytes, ...]


Reply = JsonReply | StreamReply


class Dialect(Protocol):
    """One upstream API shape (Anthropic Messages, OpenAI chat completions)."""

    def invalid(self, body: dict[str, Any]) -> str | None:
        """Why the request is malformed, or None."""

    def answer(self, turn: Turn, body: dict[str, Any]) -> Reply:
        """The reply carrying ``turn``, streamed if the request asked for it."""

    def error_body(self, error_type: str, message: str, request_id: str) -> dict[str, Any]:
        """The JSON body of an HTTP error."""

    def error_chunk(self, error_type: str, message: str, request_id: str) -> bytes:
        """The frame that reports an error inside a stream."""


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_digest(body: Mapping[str, Any]) -> str:
    """A stable digest of what was asked, ignoring how it is delivered."""
    asked = {k: v for k, v in body.items() if k not in _DELIVERY_FIELDS}
    return hashlib.sha256(canonical(asked).encode()).hexdigest()


def derived_id(prefix: str, digest: str, position: int | str = "") -> str:
    return prefix + hashlib.sha256(f"{digest}:{position}".encode()).hexdigest()[:24]


def tokens_for(value: Any) -> int:
    """A plausible token count: about four characters of JSON per token."""
    text = value if isinstance(value, str) else canonical(value)
    return max(1, -(-len(text) // 4))


def pieces(text: str, size: int, *, at_least: int = 1) -> list[str]:
    """``text`` split into chunks of ``size`` characters, and into at least
    ``at_least`` chunks when it is long enough to split."""
    if not text:
        return []
    size = max(1, min(size, -(-len(text) // at_least)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def sse_frame(data: Any, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def error_type_for(status: int) -> str:
    """The Anthropic error type the hosted API uses for ``status``."""
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


def status_for(error_type: str) -> int:
    return next((s for s, t in _ERROR_TYPES.items() if t == error_type), 500)


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
