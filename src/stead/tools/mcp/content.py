"""An MCP ``CallToolResult`` -> what the model sees (``tool_result`` content blocks).

Text stays text; images the Messages API accepts become image blocks; embedded
text resources become text; anything else (audio, binary resources, links) is
described in a line of text, so the model knows it was there.
"""

from __future__ import annotations

import json
from typing import Any

from stead.jsonvalues import Json
from stead.tools.definitions import IMAGE_MAX_BASE64_BYTES
from stead.tools.outcome import ToolOutcome

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
TEXT_LIMIT = 100 * 1024
"""Characters of text the model gets from one call, as bash's output cap."""
IMAGE_LIMIT = 20
"""Images the model gets from one call; each at most ``IMAGE_MAX_BASE64_BYTES``
of base64, as ``read`` sends, and all of them together no more."""


def call_outcome(result: Any) -> ToolOutcome:
    """The result as content blocks, bounded whatever the server sent: adjacent
    text is one block (a result of 100,000 one-character blocks is one short
    text, not a log event and a request the model cannot take), text is cut at
    ``TEXT_LIMIT`` and images past their limits are described instead."""
    blocks: list[Json] = []
    run: list[str] = []  # the text since the last image: one block at the next
    text_budget, image_bytes, images = TEXT_LIMIT, IMAGE_MAX_BASE64_BYTES, 0

    def end_run() -> None:
        if run:
            blocks.append({"type": "text", "text": "\n".join(run)})
            run.clear()

    for item in result.content:
        block = _block(item)
        if block["type"] == "image":
            size = len(block["source"]["data"])
            if images < IMAGE_LIMIT and size <= image_bytes:
                images, image_bytes = images + 1, image_bytes - size
                end_run()
                blocks.append(block)
                continue
            block = _note(f"an image ({size} bytes of base64) past this result's image limits")
        text = block["text"]
        if text_budget <= 0 or not text:
            continue
        if len(text) > text_budget:
            text = text[:text_budget] + f"\n[output truncated at {TEXT_LIMIT} characters]"
        text_budget -= len(text) + 1  # and the line joining it to the run
        run.append(text)
    end_run()
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
