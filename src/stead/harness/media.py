"""The media (images and PDFs) of a summarising request (``compaction.py``):
which of an event's media it shows, and the note that stands for one it leaves
out.

A summarising request that carried every medium whole could never be sent once
the older part held one too large for it (a PDF longer than the window, a
message of many images): every later turn ended at the compaction limit. An
event's media are shown while they fit the room given to it; each of the others
becomes a short text naming what it was and where it came from, so the summary
can still say so. Only the request is changed: the log keeps every medium.
What the media's base64 adds to a request's bytes (``media_bytes``) says
whether compacting can make a request its API refused as too large fit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stead.events import EventType
from stead.harness.steps import RESULT_KEYS
from stead.harness.windows import PDF, PDF_PAGE_TOKENS, MediaTokens, estimate_tokens
from stead.jsonvalues import Json

MEDIA_BLOCKS = ("image", "document")
SOURCES = ("base64", "url")
"""The sources that make a block a medium here (a document of text or of
content blocks is text, cut as text is; a file source never reaches a request)."""


@dataclass
class MediaRoom:
    """What is left of the tokens an event's media may take in a summarising
    request (None: no medium is shown), each counted as ``scale`` times its
    estimate (how many times the estimate the model counted)."""

    left: float | None
    scale: float = 1.0

    def takes(self, tokens: int) -> bool:
        """Whether a medium of ``tokens`` by the estimate still fits, and if so
        it is taken."""
        counted = tokens * self.scale
        if self.left is None or counted > self.left:
            return False
        self.left -= counted
        return True


def media_source(value: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The source of ``value`` if it is an image or PDF block sent as bytes or
    by URL."""
    if value.get("type") not in MEDIA_BLOCKS:
        return None
    source = value.get("source")
    if not isinstance(source, Mapping) or source.get("type") not in SOURCES:
        return None
    return source


def media_tokens(source: Mapping[str, Any], media: MediaTokens | None) -> int:
    """The estimate of a medium's source (``windows.py``)."""
    return estimate_tokens(source, media)


def media_bytes(value: Any) -> int:
    """The characters of the base64 data of every medium under ``value`` (an
    event, a request's messages): what its media add to a request's bytes."""
    total = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            data = item.get("data")
            if item.get("type") == "base64" and isinstance(data, str):
                total += len(data)
            else:
                pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return total


def origin(event: Json) -> str:
    """Where an event's media came from, as a left-out note names it."""
    kind = event.get("type")
    if kind == EventType.USER_MESSAGE:
        return f"in the user's message {event.get('id')}"
    if kind in RESULT_KEYS:
        mcp = "MCP " if kind == EventType.AGENT_MCP_TOOL_RESULT else ""
        return f"in the result of {mcp}tool call {event.get(RESULT_KEYS[kind])}"
    return f"in event {event.get('id')}"


def left_out(block: Mapping[str, Any], where: str, tokens: int) -> Json:
    """The text block that stands for the medium ``block`` (of ``tokens`` by
    the estimate), which came from ``where``."""
    source = block["source"]
    kind = "image" if block.get("type") == "image" else "document"
    if source.get("type") == "url":
        what = f"{kind} at {source.get('url')}"
    else:
        media_type = source.get("media_type")
        details = [str(media_type)]
        if media_type == PDF and tokens >= PDF_PAGE_TOKENS:
            pages = tokens // PDF_PAGE_TOKENS
            details.append(f"{pages} page" + ("s" if pages > 1 else ""))
        data = source.get("data")
        if isinstance(data, str):
            details.append(_size(len(data) * 3 // 4 - data[-2:].count("=")))
        what = f"{kind} ({', '.join(details)})"
    title = block.get("title")
    if isinstance(title, str) and title:
        what += f' titled "{title[:200]}"'
    text = f"[{what}, {where}: left out of this request, too large for it]"
    return {"type": "text", "text": text}


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.0f} KB"
    return megabytes(count)


def megabytes(count: int) -> str:
    """``count`` bytes as a person reads them."""
    return f"{count / (1024 * 1024):.1f} MB"
