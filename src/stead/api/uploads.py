"""Reading a ``multipart/form-data`` file upload: size caps, field rules, the
stored filename and MIME type.

The body is parsed by Starlette's multipart parser into a spooled temporary
file (in memory up to 1 MiB, then on disk), counted as it arrives so a body past
the limit stops at the limit. Only ``file`` and the route's named text fields
are accepted; anything else is a 400 naming it.
"""

from __future__ import annotations

import codecs
import mimetypes
import re
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

import anyio
from fastapi import Request
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from stead.api.errors import ApiError
from stead.schemas import RequestError

FORM_OVERHEAD = 1024 * 1024
"""Bytes a body may carry beyond the file: part headers, boundaries, text fields."""
MAX_FIELDS = 8
MAX_FILENAME_BYTES = 255
CHUNK_BYTES = 1024 * 1024
SNIFF_BYTES = 512
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SIGNATURES = (
    (b"%PDF-", "application/pdf"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"PK\x03\x04", "application/zip"),
)
OCTET_STREAM = "application/octet-stream"


@dataclass
class Upload:
    """One parsed upload: the file (rewound) and the form's text fields."""

    file: UploadFile
    size: int
    filename: str | None
    declared_type: str | None
    fields: dict[str, str]

    async def chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.file.read(CHUNK_BYTES):
            yield chunk


def too_large(limit: int) -> ApiError:
    return ApiError(
        413, f"file: larger than the {limit}-byte limit of this server (STEAD_MAX_FILE_BYTES)"
    )


async def read_upload(request: Request, max_file_bytes: int, fields: tuple[str, ...]) -> Upload:
    """The upload in ``request``: one part ``file`` and at most the text ``fields``.
    The caller closes ``Upload.file``."""
    media = request.headers.get("content-type", "")
    if media.partition(";")[0].strip().lower() != "multipart/form-data":
        raise ApiError(415, "content-type: send the file as multipart/form-data")
    limit = max_file_bytes + FORM_OVERHEAD
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(max_file_bytes)
    parser = MultiPartParser(
        request.headers, _capped(request, limit, max_file_bytes), max_fields=MAX_FIELDS
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise RequestError(f"body: {exc}") from None
    files = [value for _, value in form.multi_items() if isinstance(value, UploadFile)]
    try:
        return _upload(form.multi_items(), fields, max_file_bytes)
    except BaseException:
        for opened in files:
            await opened.close()
        raise


def _upload(
    items: list[tuple[str, str | UploadFile]], fields: tuple[str, ...], limit: int
) -> Upload:
    found: UploadFile | None = None
    text: dict[str, str] = {}
    for name, value in items:
        if name == "file" and isinstance(value, UploadFile):
            if found is not None:
                raise RequestError("file: send exactly one file")
            found = value
        elif name == "file":
            raise RequestError("file: send the file as a file part (with a filename)")
        elif name not in fields:
            raise RequestError(f"{name}: unknown field")
        elif isinstance(value, UploadFile) or name in text:
            raise RequestError(f"{name}: send one text value")
        else:
            text[name] = value
    if found is None:
        raise RequestError("file: a file part named 'file' is required")
    size = found.size or 0
    if size > limit:
        raise too_large(limit)
    declared = found.headers.get("content-type")
    return Upload(found, size, filename(found.filename), declared, text)


async def _capped(request: Request, limit: int, file_limit: int) -> AsyncGenerator[bytes, None]:
    received = 0
    async for chunk in request.stream():
        received += len(chunk)
        if received > limit:
            raise too_large(file_limit)
        yield chunk


def filename(raw: str | None) -> str | None:
    """The last path component of the part's filename (None if there is none)."""
    name = re.split(r"[\\/]", raw or "")[-1]
    if _CONTROL.search(name):
        raise RequestError("file: the filename has a control character")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_FILENAME_BYTES:
        raise RequestError(f"file: the filename is longer than {MAX_FILENAME_BYTES} bytes")
    return name or None


async def describe(upload: Upload) -> tuple[str, str]:
    """The filename and MIME type to store: the part's content type when it names
    one, else guessed from the filename's extension, else sniffed from the first
    bytes; the filename, or ``unnamed`` plus the type's extension."""
    declared = (upload.declared_type or "").partition(";")[0].strip().lower()
    if declared and declared != OCTET_STREAM and not _MEDIA_TYPE.match(declared):
        raise RequestError(f"file: content type {declared!r} is not a type/subtype media type")
    head = await upload.file.read(SNIFF_BYTES)
    await upload.file.seek(0)
    # mimetypes reads the system's tables on first use: off the event loop.
    return await anyio.to_thread.run_sync(_describe, upload.filename, declared, head)


def _describe(name: str | None, declared: str, head: bytes) -> tuple[str, str]:
    mime = declared if declared and declared != OCTET_STREAM else None
    if mime is None and name:
        mime = mimetypes.guess_type(name, strict=False)[0]
    if mime is None:
        mime = _sniffed(head)
    return name or "unnamed" + (mimetypes.guess_extension(mime, strict=False) or ""), mime


def _sniffed(head: bytes) -> str:
    for signature, kind in _SIGNATURES:
        if head.startswith(signature):
            return kind
    try:
        # Not final: a character cut at the end of the sample is still text.
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return OCTET_STREAM
    return "text/plain" if head and b"\x00" not in head else OCTET_STREAM
