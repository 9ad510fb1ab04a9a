"""The stored filename and MIME type of an upload (``api/uploads.py``)."""

from __future__ import annotations

import pytest

from stead.api import uploads
from stead.schemas import RequestError


def test_the_filename_keeps_its_last_component() -> None:
    assert uploads.filename("dir/sub/report.pdf") == "report.pdf"
    assert uploads.filename("C:\\\\Users\\\\me\\\\a.txt") == "a.txt"
    assert uploads.filename("") is None and uploads.filename("dir/") is None


@pytest.mark.parametrize("bad", ["a\x00b.txt", "a\nb", "x" * 256])
def test_a_bad_filename_is_refused_naming_the_file(bad: str) -> None:
    with pytest.raises(RequestError, match="file: the filename"):
        uploads.filename(bad)


@pytest.mark.parametrize(
    ("name", "declared", "head", "expected"),
    [
        ("a.bin", "application/x-thing", b"", ("a.bin", "application/x-thing")),
        ("a.png", "", b"", ("a.png", "image/png")),
        ("blob", "application/octet-stream", b"%PDF-1.4", ("blob", "application/pdf")),
        (None, "", b"\xff\xd8\xff\xe0", ("unnamed.jpg", "image/jpeg")),
        ("t", "", "é".encode() * 300, ("t", "text/plain")),
        ("z", "", b"\x00\x01\x02", ("z", "application/octet-stream")),
    ],
)
def test_the_type_is_declared_guessed_or_sniffed(
    name: str | None, declared: str, head: bytes, expected: tuple[str, str]
) -> None:
    assert uploads._describe(name, declared, head[: uploads.SNIFF_BYTES]) == expected
