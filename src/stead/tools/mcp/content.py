"""An MCP ``CallToolResult`` -> what the model sees (``tool_result`` content blocks).

Text stays text; images the Messages API accepts become image blocks; embedded
text resources become text; anything else (audio, binary resources, links) is
described in a line of text, so the model knows it was there.
"""

from __future__ import annotations

import json
from typing import Any

from stead.jsonvalues import Json
from stead.tools.outcome import ToolOutcome

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
TEXT_LIMIT = 100 * 1024
"""Characters of text the model gets from one call, as bash's output cap."""


def call_outcome(result: Any) -> ToolOutcome:
    blocks: list[Json] = []
    budget = TEXT_LIMIT
    for item in result.content:
        block = _block(item)
        if block["type"] == "text":
            text = block["text"]
            if budget <= 0 or not text:
                continue
            if len(text) > budget:
                text = text[:budget] + f"\n[output truncated at {TEXT_LIMIT} characters]"
            budget -= len(text)
            block = {"type": "text", "text": text}
        blocks.append(block)
    if not blocks and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)[:TEXT_LIMIT]
        blocks.append({"type": "text", "text": text})
    if not blocks:
        return ToolOutcome.text("", is_error=bool(result.is_error))
    return ToolOutcome(blocks, bool(result.is_error))


def _block(item: Any) -> Json:
    kind = item.type
    if kind == "text":
        return {"type": "text", "text": item.text}
    if kind == "image" and item.mime_type in IMAGE_TYPES:
        source = {"type": "base64", "media_type": item.mime_type, "data": item.data}
        return {"type": "image", "source": source}
    if kind == "resource":
        resource = item.resource
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return {"type": "text", "text": text}
        return _note(f"binary resource {resource.uri} ({resource.mime_type or 'unknown type'})")
    if kind == "resource_link":
        return _note(f"resource link {item.uri} ({item.name})")
    return _note(f"{kind} content ({getattr(item, 'mime_type', None) or 'unknown type'})")


def _note(what: str) -> Json:
    return {"type": "text", "text": f"[the MCP server returned {what}, not shown]"}
