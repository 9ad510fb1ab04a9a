"""``FileKeeper``: the Files API's bytes in the blob store, their metadata in the store.

Every blob is named by a row before it is written, so nothing is orphaned:

* upload: the row is begun pending (invisible), the blob written, then the row
  made ready. An upload that dies leaves a pending row (and no blob, or a
  complete one); after ``upload_grace`` the purger tombstones it and removes both.
* delete: the row is tombstoned (the file is gone for readers at that commit),
  then the blob removed, then the row. A blob store that fails or times out
  leaves the tombstone, which the purger retries every ``purge_interval``: a
  row never points at nothing while visible, and a blob is never forgotten.

The blob store (and obstore with it) is opened on first use: a server that
never stores a file never loads it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

import stead.blobs as blob_room
from stead.blobs import BlobConfig, BlobError
from stead.ids import new_id
from stead.runtime.clock import Clock, SystemClock
from stead.store import DatabaseBusy, FileRecord, FileScope, FileStore, NewFile, NotFound

if TYPE_CHECKING:
    from stead.blobs import BlobStore

log = logging.getLogger("stead.runtime.files")

PURGE_BATCH = 100
KEY_PREFIX = "files"


class FileExpired(Exception):
    """The file's ``expires_at`` passed: its bytes are no longer served."""

    def __init__(self, file_id: str) -> None:
        self.file_id = file_id
        super().__init__(f"file {file_id} has expired")


class FileKeeper:
    def __init__(
        self,
        store: FileStore,
        blobs: BlobConfig,
        *,
        purge_interval: float,
        upload_grace: float,
        clock: Clock | None = None,
    ) -> None:
        if purge_interval <= 0 or upload_grace <= 0:
            raise ValueError("purge_interval and upload_grace must be > 0")
        self._store = store
        self._config = blobs
        self._blobs: BlobStore | None = None
        self._purge_interval = purge_interval
        self._upload_grace = timedelta(seconds=upload_grace)
        self._clock = clock or SystemClock()

    def now(self) -> datetime:
        return self._clock.now()

    def _blob_store(self) -> BlobStore:
        if self._blobs is None:
            self._blobs = blob_room.open_blob_store(self._config)
        return self._blobs

    async def upload(
        self,
        workspace_id: str,
        filename: str,
        mime_type: str,
        size_bytes: int,
        chunks: AsyncIterable[bytes],
        *,
        expires_at: datetime | None = None,
        scope: FileScope | None = None,
    ) -> FileRecord:
        """Stores ``chunks`` (``size_bytes`` long) as a new file and returns it,
        visible. Raises ``BlobError`` if the blob store fails; the pending row
        is then collected by the purger."""
        file_id = new_id("file")
        key = f"{KEY_PREFIX}/{workspace_id}/{file_id}"
        new = NewFile(
            file_id, workspace_id, filename, mime_type, size_bytes, key, expires_at, scope
        )
        await self._store.begin_file(new)
        written = await self._blob_store().put_stream(key, chunks)
        if written.size != size_bytes:  # the caller counted what it sent; never expected
            raise BlobError(f"blob {key!r} holds {written.size} bytes, not {size_bytes}")
        try:
            return await self._store.file_ready(workspace_id, file_id)
        except NotFound:
            # The purger took the row for an abandoned upload (this one ran past
            # the grace): nothing names the blob now, so it goes here.
            with anyio.CancelScope(shield=True):
                await self._blob_store().delete(key)
            raise

    async def content(
        self, workspace_id: str, file_id: str
    ) -> tuple[FileRecord, AsyncIterator[bytes]]:
        """A visible file and its bytes in chunks (``NotFound``, ``FileExpired``,
        ``BlobError``), each chunk bounded by the blob store's timeout."""
        record = await self._store.get_file(workspace_id, file_id)
        if record.expires_at is not None and record.expires_at <= self._clock.now():
            raise FileExpired(file_id)
        return record, await self._blob_store().get_stream(record.blob_key)

    async def delete(self, workspace_id: str, file_id: str) -> FileRecord:
        """Deletes a visible file (``NotFound`` otherwise). Once the tombstone is
        committed the delete has happened; removing the bytes is retried by the
        purger if the blob store fails now (or the request is cancelled)."""
        record = await self._store.delete_file(workspace_id, file_id)
        with anyio.CancelScope(shield=True):  # bounded by the blob store's timeout
            await self._remove(record)
        return record

    async def _remove(self, record: FileRecord) -> bool:
        try:
            await self._blob_store().delete(record.blob_key)
        except BlobError as exc:
            log.warning("file %s: blob not removed yet, will retry: %s", record.id, exc)
            return False
        await self._store.forget_file(record.id)
        return True

    async def purge(self) -> int:
        """Removes the blobs and rows of deleted files and of uploads abandoned
        for longer than the grace; returns how many went. Failures stay for the
        next round."""
        removed = 0
        while True:
            stale = self._clock.now() - self._upload_grace
            batch = await self._store.files_to_purge(stale, PURGE_BATCH)
            done = [await self._remove(record) for record in batch]
            removed += sum(done)
            if len(batch) < PURGE_BATCH or not any(done):
                return removed

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Purges every ``purge_interval`` until cancelled, the first round at once
        (what a previous process left). A round the database cannot serve is
        skipped; any other store error ends the loop."""
        task_status.started()
        while True:
            try:
                await self.purge()
            except DatabaseBusy as exc:  # the database is away: the next round retries
                log.warning("file purge skipped: %s", exc)
            await self._clock.sleep(self._purge_interval)
