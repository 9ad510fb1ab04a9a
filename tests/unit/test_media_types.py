"""An image's size read from its header (``stead.media_types.image_size``),
which the read tool checks against what the Messages API takes."""

from __future__ import annotations

import base64
import struct

import pytest

from stead.media_types import image_size

# What an encoder (Pillow 13) writes for a 3x2 picture, in WebP's three forms.
WEBP_LOSSY = (
    "UklGRjwAAABXRUJQVlA4IDAAAADQAQCdASoDAAIAAUAmJaACdLoB+AADsAD+8ut//NgVzXPv9//S4P0uD9Lg/9KQAAA="
)
WEBP_LOSSLESS = "UklGRhwAAABXRUJQVlA4TA8AAAAvAkAAAAcQ/Y/+ByKi/wEA"
WEBP_EXTENDED = (
    "UklGRl4AAABXRUJQVlA4WAoAAAAQAAAAAgAAAQAAQUxQSAcAAAAAAQEBAQEBAFZQOCAwAAAA0AEAnQEqAwACAAFAJiWg"
    "AnS6AfgAA7AA/vLrf/zYFc1z7/f/0uD9Lg/S4P/SkAAA"
)


def jpeg(width: int, height: int, frame: int = 0xC2) -> bytes:
    """A JPEG's header: a JFIF segment, a table segment, then the frame."""
    jfif = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    table = b"\xff\xc4" + struct.pack(">H", 5) + b"\x00\x00\x00"
    sof = b"\xff" + bytes([frame]) + struct.pack(">HBHHB", 11, 8, height, width, 1)
    sof += b"\x01\x11\x00"
    return b"\xff\xd8" + jfif + table + sof


@pytest.mark.parametrize(
    ("data", "size"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + struct.pack(">II", 9001, 7), (9001, 7)),
        (b"GIF89a" + struct.pack("<HH", 640, 8200), (640, 8200)),
        (jpeg(8100, 30), (8100, 30)),
        (jpeg(12, 34, frame=0xC0), (12, 34)),
        (base64.b64decode(WEBP_LOSSY), (3, 2)),
        (base64.b64decode(WEBP_LOSSLESS), (3, 2)),
        (base64.b64decode(WEBP_EXTENDED), (3, 2)),
    ],
)
def test_the_size_of_each_image_type(data: bytes, size: tuple[int, int]) -> None:
    assert image_size(data) == size


@pytest.mark.parametrize(
    "data",
    [b"", b"%PDF-1.4", b"\x89PNG\r\n\x1a\n", b"GIF89a\x01", jpeg(5, 5)[:20], b"\xff\xd8\x00\x00"],
)
def test_no_size_for_what_is_no_image_or_is_cut_short(data: bytes) -> None:
    assert image_size(data) is None
