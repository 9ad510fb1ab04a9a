"""Reading an upload, and its stored filename and MIME type (``api/uploads.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx2
import pytest
from starlette.requests import Request
from starlette.types import Message

from stead.api import uploads
from stead.api.errors import ApiError
from stead.api.files import _Download
from stead.blobs import BlobUnavailable
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


def _request(files: dict[str, tuple[str | None, bytes, str]]) -> Request:
    built = httpx2.Request("POST", "http://stead.test/v1/files", files=files)
    body = built.read()
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    headers = [(k.lower().encode(), v.encode()) for k, v in built.headers.items()]
    return Request({"type": "http", "method": "POST", "headers": headers}, receive)


@pytest.mark.anyio
async def test_a_file_part_without_a_filename_is_a_file_of_any_size() -> None:
    """Starlette would read it as a text field: whole, and refused past 1 MiB."""
    data = bytes(range(256)) * 8192  # 2 MiB, not text
    upload = await uploads.read_upload(
        _request({"file": (None, data, "application/octet-stream")}), 4 * len(data), ()
    )
    try:
        assert (upload.filename, upload.size) == (None, len(data))
        assert b"".join([chunk async for chunk in upload.chunks()]) == data
    finally:
        await upload.file.close()


def _raw_request(disposition: str, data: bytes) -> Request:
    body = (
        (f"--b\r\nContent-Disposition: {disposition}\r\nContent-Type: text/plain\r\n\r\n").encode()
        + data
        + b"\r\n--b--\r\n"
    )
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    headers = [(b"content-type", b"multipart/form-data; boundary=b")]
    return Request({"type": "http", "method": "POST", "headers": headers}, receive)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("disposition", "named"),
    [
        ("form-data; name=\"file\"; filename*=UTF-8''caf%C3%A9%20menu.txt", "café menu.txt"),
        ("form-data; name=\"file\"; filename*=utf-8'en'a.txt", "a.txt"),
        ("form-data; name=\"file\"; filename*=UTF-8''%FF.txt", None),  # not UTF-8: no name
        # Only the charsets RFC 5987 requires: no codec a client names runs.
        ("form-data; name=\"file\"; filename*=punycode''a%5Cb.txt", None),
        ("form-data; name=\"file\"; filename*=unicode_escape''%5Cud800.txt", None),
        ("form-data; name=\"file\"; filename*=ISO-8859-1''caf%E9.txt", "café.txt"),
        ('form-data; name="file"', None),
    ],
)
async def test_a_part_named_only_by_its_extended_filename_keeps_that_name(
    disposition: str, named: str | None
) -> None:
    upload = await uploads.read_upload(_raw_request(disposition, b"menu"), 1024, ())
    try:
        assert (upload.filename, upload.size) == (named, 4)
    finally:
        await upload.file.close()


@pytest.mark.anyio
async def test_a_body_that_stops_arriving_is_refused_with_a_408(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client cut off by the network sends nothing more and never closes:
    before, the request held its spooled part of the body for good."""
    monkeypatch.setattr(uploads, "BODY_IDLE_SECONDS", 0.2)
    head = b'--b\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\nsome'
    sent = [{"type": "http.request", "body": head, "more_body": True}]

    async def receive() -> Message:
        if sent:
            return sent.pop(0)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    headers = [(b"content-type", b"multipart/form-data; boundary=b")]
    request = Request({"type": "http", "method": "POST", "headers": headers}, receive)
    with pytest.raises(ApiError) as refused:
        await uploads.read_upload(request, 1024 * 1024, ())
    assert refused.value.status == 408 and "nothing of it arrived" in str(refused.value)


@pytest.mark.anyio
async def test_a_download_the_blob_store_cuts_short_is_left_unfinished() -> None:
    """Its status went out with the first bytes; the answer is not finished
    short of its content-length (the server would raise and log a traceback),
    so the server closes the connection and the client sees the body end."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b"abc"
        raise BlobUnavailable("the store stopped answering")

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    download = _Download("file_x", chunks(), {"content-length": "10"})
    await download.stream_response(send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[1]["body"] == b"abc" and sent[1]["more_body"] is True
