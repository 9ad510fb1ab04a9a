"""Reading a ``multipart/form-data`` file upload: size caps, field rules, the
stored filename and MIME type.

The body is parsed by Starlette's multipart parser into a spooled temporary
file (in memory up to 1 MiB, then on disk in ``TMPDIR``; a full one is a 503),
counted as it arrives so a body past the limit stops at the limit. Only the
file part (``file`` for the Files API, ``files`` for skills) and the route's
named text fields are accepted; anything else is a 400 naming it. A file part
needs no ``filename``: the SDK sends bytes or a file object without a name so,
and the Files API stores it as ``unnamed`` plus the extension of its type.
"""

from __future__ import annotations

import codecs
import errno
import logging
import mimetypes
import re
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from tempfile import SpooledTemporaryFile

import anyio
from fastapi import Request
from starlette.datastructures import FormData, Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect

from stead.api.errors import ApiError
from stead.media_types import by_signature
from stead.schemas import RequestError

log = logging.getLogger("stead.api.uploads")

FORM_OVERHEAD = 1024 * 1024
"""Bytes a body may carry beyond the file: part headers, boundaries, text fields."""
MAX_FIELDS = 8
MAX_FILENAME_BYTES = 255
CHUNK_BYTES = 1024 * 1024
BODY_IDLE_SECONDS = 60.0
"""How long an upload's body may stop arriving before the request is refused."""
SNIFF_BYTES = 512
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_EXTENDED_NAME = re.compile(r";\s*filename\*\s*=\s*([^;\s]+)", re.IGNORECASE)
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


def too_large(limit: int, field: str = "file", setting: str = "STEAD_MAX_FILE_BYTES") -> ApiError:
    return ApiError(413, f"{field}: larger than the {limit}-byte limit of this server ({setting})")


async def read_upload(request: Request, max_file_bytes: int, fields: tuple[str, ...]) -> Upload:
    """The upload in ``request``: one part ``file`` and at most the text ``fields``.
    The caller closes ``Upload.file``."""
    # One file: a second part with a file's name is refused at its headers.
    form = await _parse(request, max_file_bytes, max_files=1, fields=fields)
    try:
        return _upload(form.multi_items(), fields, max_file_bytes)
    except BaseException:
        await form.close()
        raise


class _FileParts(MultiPartParser):
    """Starlette's parser, which takes a part with a file's name (``names``) for
    a file even without a ``filename``. Starlette reads such a part as a text
    field: whole into memory, at most 1 MiB, and decoded as text. A part with a
    ``filename`` under another name is refused at its headers: Starlette would
    spool it (its first MiB in memory), and a body of many such parts held as
    many MiB in memory before the form was refused."""

    def __init__(
        self,
        headers: Headers,
        stream: AsyncGenerator[bytes, None],
        *,
        names: tuple[str, ...],
        fields: tuple[str, ...],
        max_files: int,
    ) -> None:
        super().__init__(headers, stream, max_files=max_files, max_fields=MAX_FIELDS)
        self._names = names
        self._fields = fields

    def on_headers_finished(self) -> None:
        part = self._current_part
        try:
            super().on_headers_finished()
        except MultiPartException as exc:
            # A file too many, and not even one of the form's: that is the answer.
            if str(exc).startswith("Too many files") and part.field_name not in self._names:
                raise RequestError(_misplaced(part.field_name, self._fields)) from None
            raise
        if part.field_name not in self._names:
            if part.file is not None:
                raise RequestError(_misplaced(part.field_name, self._fields))
            return
        if part.file is not None:
            return
        # What Starlette does for a part with a filename (``on_headers_finished``).
        self._current_fields -= 1
        self._current_files += 1
        if self._current_files > self.max_files:
            limit = self.max_files
            raise MultiPartException(f"Too many files. Maximum number of files is {limit}.")
        # Closed with the form (``FormData.close``), or by the parser on an error.
        spool = SpooledTemporaryFile(max_size=self.spool_max_size)  # noqa: SIM115
        self._files_to_close_on_error.append(spool)
        part.file = UploadFile(
            file=spool,  # type: ignore[arg-type]
            size=0,
            filename=_extended_filename(part.content_disposition or b""),
            headers=Headers(raw=part.item_headers),
        )


def _misplaced(name: str, fields: tuple[str, ...]) -> str:
    """Why the part ``name`` is refused: not a field, or a text field sent as a file."""
    return f"{name}: send one text value" if name in fields else f"{name}: unknown field"


def _extended_filename(disposition: bytes) -> str | None:
    """A part's RFC 5987 ``filename*`` (``UTF-8''caf%C3%A9.txt``), which
    Starlette's header parser drops; None if it has none that decodes."""
    found = _EXTENDED_NAME.search(disposition.decode("latin-1"))
    if found is None:
        return None
    charset, _, rest = found.group(1).strip('"').partition("'")
    _, _, encoded = rest.partition("'")
    if charset.lower() not in ("utf-8", "iso-8859-1"):  # the two RFC 5987 requires
        return None
    try:
        return urllib.parse.unquote(encoded, encoding=charset, errors="strict")
    except UnicodeError:
        return None


async def _parse(
    request: Request,
    max_file_bytes: int,
    *,
    max_files: int,
    fields: tuple[str, ...],
    field: str = "file",
    setting: str = "STEAD_MAX_FILE_BYTES",
) -> FormData:
    """The form of a multipart body at most ``max_file_bytes`` (plus the form's
    overhead) long; the caller closes it."""
    media = request.headers.get("content-type", "")
    if media.partition(";")[0].strip().lower() != "multipart/form-data":
        raise ApiError(415, "content-type: send the file as multipart/form-data")
    limit = max_file_bytes + FORM_OVERHEAD
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise too_large(max_file_bytes, field, setting)
    parser = _FileParts(
        request.headers,
        _capped(request, limit, too_large(max_file_bytes, field, setting)),
        names=(field, f"{field}[]"),
        fields=fields,
        max_files=max_files,
    )
    try:
        return await parser.parse()
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        # The operator's to fix; the client may retry once there is room again.
        log.warning("an upload found no room in the temporary directory (TMPDIR): %s", exc)
        raise ApiError(
            503, "body: this server has no room to receive the upload now; retry later"
        ) from None
    except MultiPartException as exc:
        if str(exc).startswith("Too many files"):
            if max_files == 1:
                raise RequestError(f"{field}: send exactly one file") from None
            raise RequestError(f"{field}: send at most {max_files} files") from None
        raise RequestError(f"body: {exc}") from None


async def read_files(
    request: Request, max_bytes: int, max_files: int, fields: tuple[str, ...]
) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """The parts named ``files`` (or ``files[]``, as the SDK sends a list), each
    as (its filename with the path it names, its bytes), at most ``max_bytes``
    together, and the text ``fields``."""
    form = await _parse(
        request,
        max_bytes,
        max_files=max_files,
        fields=fields,
        field="files",
        setting="STEAD_SKILL_MAX_BYTES",
    )
    try:
        found, text = _split(form.multi_items(), ("files", "files[]"), fields)
        parts: list[tuple[str, bytes]] = []
        for i, part in enumerate(found):
            if not part.filename:
                raise RequestError(f"files.{i}: send the file's path as its filename")
            parts.append((part.filename, await part.read()))
        return parts, text
    finally:
        await form.close()


def _split(
    items: list[tuple[str, str | UploadFile]], names: tuple[str, ...], fields: tuple[str, ...]
) -> tuple[list[UploadFile], dict[str, str]]:
    """The file parts named one of ``names``, and the text ``fields`` (each once)."""
    found: list[UploadFile] = []
    text: dict[str, str] = {}
    for name, value in items:
        if name in names and isinstance(value, UploadFile):  # always, as ``_FileParts`` parses
            found.append(value)
        elif name not in fields or isinstance(value, UploadFile):
            raise RequestError(_misplaced(name, fields))
        elif name in text:
            raise RequestError(f"{name}: send one text value")
        else:
            text[name] = value
    return found, text


def _upload(
    items: list[tuple[str, str | UploadFile]], fields: tuple[str, ...], limit: int
) -> Upload:
    files, text = _split(items, ("file",), fields)
    if len(files) > 1:
        raise RequestError("file: send exactly one file")
    found = files[0] if files else None
    if found is None:
        raise RequestError("file: a file part named 'file' is required")
    size = found.size or 0
    if size > limit:
        raise too_large(limit)
    declared = found.headers.get("content-type")
    return Upload(found, size, filename(found.filename), declared, text)


async def _capped(request: Request, limit: int, error: ApiError) -> AsyncGenerator[bytes, None]:
    """The body, refused past ``limit`` or once it stops arriving for
    ``BODY_IDLE_SECONDS`` (a client cut off by the network never closes: its
    request would hold its spooled bytes for good)."""
    received = 0
    chunks = request.stream().__aiter__()
    while True:
        try:
            with anyio.fail_after(BODY_IDLE_SECONDS):
                chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        except ClientDisconnect:
            # Nobody hears the answer; this keeps a client that hung up from
            # being logged as the server's error, with its traceback.
            raise ApiError(400, "body: the client left before sending all of it") from None
        except TimeoutError:
            raise ApiError(
                408, f"body: nothing of it arrived for {BODY_IDLE_SECONDS:g} s; send it again"
            ) from None
        received += len(chunk)
        if received > limit:
            raise error
        yield chunk


def filename(raw: str | None) -> str | None:
    """The last path component of the part's filename (None if there is none)."""
    name = re.split(r"[\\/]", raw or "")[-1]
    if _CONTROL.search(name):
        raise RequestError("file: the filename has a control character")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, from a part's odd charset
        raise RequestError("file: the filename is not valid text") from None
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
    if (kind := by_signature(head)) is not None:
        return kind
    try:
        # Not final: a character cut at the end of the sample is still text.
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return OCTET_STREAM
    return "text/plain" if head and b"\x00" not in head else OCTET_STREAM
