"""An MCP tool result as the model gets it (``tools.mcp.content``): bounded
whatever the server sent."""

from __future__ import annotations

import base64

from mcp.types import AudioContent, CallToolResult, ImageContent, TextContent

from stead.tools.definitions import IMAGE_MAX_BASE64_BYTES
from stead.tools.mcp.content import IMAGE_LIMIT, TEXT_LIMIT, call_outcome


def image(size: int) -> ImageContent:
    data = base64.b64encode(b"\0" * (size * 3 // 4)).decode()
    return ImageContent(type="image", data=data, mimeType="image/png")


def test_many_small_blocks_are_one_text() -> None:
    """100,000 one-character blocks made an event of 3 MB and a request of
    351,280 tokens, which failed every later turn of the session."""
    many = [TextContent(type="text", text="x") for _ in range(100_000)]
    blocks = call_outcome(CallToolResult(content=many, isError=False)).content
    assert len(blocks) == 1 and blocks[0]["type"] == "text"
    assert len(blocks[0]["text"]) <= TEXT_LIMIT + 100
    sounds = [AudioContent(type="audio", data="AAAA", mimeType="audio/wav")] * 1000
    noted = call_outcome(CallToolResult(content=sounds, isError=False)).content
    assert len(noted) == 1 and "audio content" in noted[0]["text"]


def test_images_past_their_limits_are_described_instead() -> None:
    big = call_outcome(CallToolResult(content=[image(IMAGE_MAX_BASE64_BYTES + 4)], isError=False))
    assert [b["type"] for b in big.content] == ["text"]
    assert "image limits" in big.content[0]["text"]
    half = IMAGE_MAX_BASE64_BYTES // 2
    three = call_outcome(CallToolResult(content=[image(half)] * 3, isError=False)).content
    assert [b["type"] for b in three] == ["image", "image", "text"]
    small = call_outcome(CallToolResult(content=[image(100)] * (IMAGE_LIMIT + 5), isError=False))
    assert [b["type"] for b in small.content] == ["image"] * IMAGE_LIMIT + ["text"]
