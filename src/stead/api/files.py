"""/v1/files: upload (multipart), list, retrieve metadata, download, delete.

Bytes go to the blob store and metadata to the store through
``runtime.FileKeeper``; this module reads the request and shapes the answer.
Another workspace's file ids answer 404, like unknown ones.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from urllib.parse import quote

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import StreamingResponse
from starlette.types import Send

from stead.api import openapi, pagination, uploads, wire
from stead.api.deps import Caller, caller, services
from stead.api.errors import ApiError
from stead.api.params import FileId, ResourceId
from stead.api.wire import JSONResponse
from stead.blobs import BlobError
from stead.runtime import FileExpired
from stead.schemas import RequestError

log = logging.getLogger("stead.api.files")
router = APIRouter(prefix="/v1/files", tags=["files"])
FILE = openapi.response("beta.BetaFileMetadata")
EXPIRES_MIN, EXPIRES_MAX = 3600, 7_776_000
"""Bounds of ``expires_in_seconds`` (one hour to ninety days), as the spec says."""
MAX_IDS = 100


@router.post("", responses=openapi.response("beta.BetaFileMetadata", 413, 415))
async def upload_file(request: Request, who: Caller = Depends(caller)) -> JSONResponse:
    app = services(request)
    limit = app.settings.max_file_bytes
    upload = await uploads.read_upload(request, limit, ("expires_in_seconds",))
    try:
        expires = _expires_in(upload.fields.get("expires_in_seconds"))
        name, mime = await uploads.describe(upload)
        record = await app.files.upload(
            who.workspace_id,
            name,
            mime,
            upload.size,
            upload.chunks(),
            expires_at=None if expires is None else app.files.now() + expires,
        )
    finally:
        await upload.file.close()
    return JSONResponse(wire.file(record, app.files.now()))


def _expires_in(raw: str | None) -> timedelta | None:
    if raw is None:
        return None
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or not EXPIRES_MIN <= int(text) <= EXPIRES_MAX:
        raise RequestError(
            f"expires_in_seconds: expected a whole number from {EXPIRES_MIN} to {EXPIRES_MAX}"
        )
    return timedelta(seconds=int(text))


@router.get("")
async def list_files(
    request: Request,
    limit: int | None = Query(None, ge=1, le=1000),
    page: str | None = Query(None),
    scope_id: ResourceId | None = Query(None),
    ids: list[ResourceId] | None = Query(None, alias="ids[]"),
    who: Caller = Depends(caller),
) -> JSONResponse:
    app = services(request)
    store, now = app.store, app.files.now()
    if ids is not None:
        if limit is not None or page is not None:
            raise RequestError("ids: cannot be combined with page or limit")
        wanted = list(dict.fromkeys(ids))
        if len(wanted) > MAX_IDS:
            raise RequestError(f"ids: at most {MAX_IDS} distinct ids")
        found = await store.files_by_ids(who.workspace_id, wanted)
        if scope_id is not None:
            found = [f for f in found if f.scope is not None and f.scope.id == scope_id]
        return JSONResponse({"data": [wire.file(f, now) for f in found], "next_page": None})
    # The cursor is bound to the filter: reused with another scope it is a 400.
    name = "files" if scope_id is None else f"files:{scope_id}"
    return JSONResponse(
        await pagination.newest_first(
            request,
            who,
            name,
            20 if limit is None else limit,
            page,
            lambda at: store.list_files(who.workspace_id, at, scope_id),
            lambda record: wire.file(record, now),
        )
    )


@router.get("/{file_id}", responses=FILE)
async def retrieve_file_metadata(
    request: Request, file_id: FileId, who: Caller = Depends(caller)
) -> JSONResponse:
    app = services(request)
    record = await app.store.get_file(who.workspace_id, file_id)
    return JSONResponse(wire.file(record, app.files.now()))


@router.get(
    "/{file_id}/content",
    responses={200: {"content": {"application/octet-stream": {}}}, **openapi.errors(503)},
)
async def download_file(
    request: Request, file_id: FileId, who: Caller = Depends(caller)
) -> StreamingResponse:
    try:
        record, chunks = await services(request).files.content(who.workspace_id, file_id)
    except FileExpired as exc:
        raise ApiError(404, str(exc), code="file_expired") from None
    # RFC 6266/5987: the stored name may hold anything but control characters.
    disposition = f"attachment; filename*=UTF-8''{quote(record.filename, safe='')}"
    # The stored type as it is: Starlette would add "charset=utf-8" to a text/ one.
    # A browser sniffs no other type (an upload's declared text/plain run as HTML).
    headers = {
        "content-type": record.mime_type,
        "content-length": str(record.size_bytes),
        "content-disposition": disposition,
        "x-content-type-options": "nosniff",
    }
    return _Download(file_id, chunks, headers)


class _Download(StreamingResponse):
    """A file's bytes. If the blob store fails mid-way the answer is left
    unfinished: its status went out with its first bytes, and a body ended
    short of its ``content-length`` is how the client learns it (the server
    closes the connection); finished, the server would raise and log a
    traceback for the short body."""

    def __init__(self, file_id: str, chunks: AsyncIterator[bytes], headers: dict[str, str]) -> None:
        super().__init__(chunks, headers=headers)
        self._file_id = file_id

    async def stream_response(self, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        try:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except BlobError as exc:
            log.warning("download of %s cut short: %s", self._file_id, exc)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@router.delete("/{file_id}", responses=openapi.response("beta.BetaDeletedFile"))
async def delete_file(
    request: Request, file_id: FileId, who: Caller = Depends(caller)
) -> JSONResponse:
    await services(request).files.delete(who.workspace_id, file_id)
    return JSONResponse({"id": file_id, "type": "file_deleted"})
