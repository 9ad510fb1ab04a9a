"""What both wire dialects of the fake model share: replies, ids, token estimates.

Ids and token counts are derived from the request, so the same request always
gets the same message and tool-call ids (a re-sent request after a crash looks
exactly like the first answer).
"""

from __future__ import annotations

import hashlib
import json
import marshal
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from stead.jsonvalues import canonical, canonical_array, canonical_object
from stead.testing.scripts import Turn

# Request fields that change how an answer is delivered, not what it is.
_DELIVERY_FIELDS = ("stream", "stream_options")
MAX_TEXTS = 50_000
"""Texts ``Texts`` keeps; past it, the oldest go."""


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

    def prompt_tokens(self, body: dict[str, Any]) -> int:
        """What the fake counts of the request's prompt (its usage says as much)."""

    def too_long(self, counted: int, window: int, request_id: str) -> JsonReply:
        """The error the dialect's API answers a prompt longer than its window with."""


class Texts:
    """Canonical texts of the parts of requests, kept by exact value.

    In a long session every request repeats the conversation so far, and
    encoding it again was most of what the fake did per call: 2.6 of 3.7 ms
    for the 201st message of a bash session, against 0.5 for the first, time
    that benchmarks counted as stead's. A value is looked up by its ``marshal``
    form, which costs a fifth of an encoding and tells apart what equality
    would not (``True`` and ``1``, ``1`` and ``1.0``); a dict written in
    another key order is only encoded again. Shared by the requests a server
    answers at once (a lock guards the keeping, not the lookup).
    """

    def __init__(self, limit: int = MAX_TEXTS) -> None:
        self._texts: dict[bytes, str] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def canonical(self, value: Any) -> str:
        """``canonical(value)``."""
        key = marshal.dumps(value)
        text = self._texts.get(key)
        if text is None:
            text = canonical(value)
            with self._lock:
                if len(self._texts) >= self._limit:
                    del self._texts[next(iter(self._texts))]
                self._texts[key] = text
        return text

    def request_digest(self, body: Mapping[str, Any]) -> str:
        """A stable digest of what was asked, ignoring how it is delivered: of
        ``canonical`` of the body without its delivery fields, put together
        from its values' texts (each message's on its own)."""
        asked = {k: v for k, v in body.items() if k not in _DELIVERY_FIELDS}
        return hashlib.sha256(canonical_object(asked, self._member).encode()).hexdigest()

    def _member(self, key: str, value: Any) -> str:
        if key == "messages" and isinstance(value, list):
            return canonical_array(map(self.canonical, value))
        return self.canonical(value)


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
