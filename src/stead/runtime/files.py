"""``FileKeeper``: the Files API's bytes in the blob store, their metadata in the store.

Every blob is named by a row before it is written, so nothing is orphaned:

* upload: the row is begun pending (invisible), the blob written, then the row
  made ready. An upload that dies leaves a pending row (and no blob, or a
  complete one); after ``upload_grace`` the purger tombstones it and removes both.
* delete: the row is tombstoned (the file is gone for readers at that commit),
  then the blob removed, then the row. A blob store that fails or times out
  leaves the tombstone, which the purger retries every ``purge_interval``: a
  row never points at nothing while visible, and a blob is never forgotten.
* expiry: a file whose ``expires_at`` passed is no longer served (``FileExpired``)
  but its metadata stays. The purger removes its blob, then records that on
  the row (``bytes_removed``). Removing a blob is idempotent, so a purger that
  dies between the two, or two purgers (several processes on one database)
  that take the same file, remove it harmlessly twice; the row is marked once.
* quota: ``begin_file`` counts the new file against the workspace's quota in
  its own transaction (``StorageQuotaExceeded``, nothing written).

The blob store (and obstore with it) is opened on first use: a server that
never stores a file never loads it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskStatus

import stead.blobs as blob_room
from stead.blobs import BlobConfig, BlobError
from stead.failpoints import FailPoints
from stead.ids import new_id
from stead.runtime.clock import Clock
from stead.runtime.purging import PurgeTerms, purge_every, purge_in_batches
from stead.store import FileRecord, FileScope, FileStore, NewFile, NotFound

if TYPE_CHECKING:
    from stead.blobs import BlobStore

log = logging.getLogger("stead.runtime.files")

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
        quota_bytes: int = 0,
        clock: Clock | None = None,
        failpoints: FailPoints | None = None,
    ) -> None:
        self._store = store
        self._failpoints = failpoints or FailPoints(None)
        self.quota_bytes = quota_bytes
        """Each workspace's byte quota unless its ``file_storage_bytes`` limit
        says otherwise; 0: none."""
        self._config = blobs
        self._blobs: BlobStore | None = None
        self._terms = PurgeTerms.of(purge_interval, upload_grace, clock)
        self._clock = self._terms.clock

    def now(self) -> datetime:
        return self._clock.now()

    def blob_store(self) -> BlobStore:
        """The blob store, opened on first use; shared with ``MemoryKeeper`` so one
        connection pool serves both."""
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
        new = await self.stage(
            workspace_id, filename, mime_type, size_bytes, chunks, expires_at, scope
        )
        try:
            return await self._store.file_ready(workspace_id, new.id)
        except NotFound:
            await self.abandon(new)
            raise

    async def stage(
        self,
        workspace_id: str,
        filename: str,
        mime_type: str,
        size_bytes: int,
        chunks: AsyncIterable[bytes],
        expires_at: datetime | None = None,
        scope: FileScope | None = None,
    ) -> NewFile:
        """Writes a pending (invisible) file: its row, then its blob. The caller
        makes it ready in a transaction of its own (``file_ready``, or one that
        records what the file belongs to with it); left pending, the purger
        collects it after the grace. ``BlobError`` if the blob store fails."""
        new = new_file(workspace_id, filename, mime_type, size_bytes, expires_at, scope)
        await self._store.begin_file(new, quota=self.quota_bytes)
        try:
            await self._write_blob(new.blob_key, size_bytes, chunks)
        except Exception:
            await self._give_up(new)
            raise
        return new

    async def _give_up(self, new: NewFile) -> None:
        """Tombstones a staged file whose blob was not written, so it stops
        counting against the quota now rather than after the grace, and removes
        what there is of its blob (else the purger does). Its own failures are
        logged: the caller raises the one that stopped the upload."""
        with anyio.CancelScope(shield=True):  # bounded by the store's and blob store's timeouts
            try:
                tombstoned = await self._store.abandon_file(new.id)
                if tombstoned is not None:
                    await self._remove(tombstoned)
            except Exception as exc:  # the purger collects it after the grace
                log.warning("file %s: its failed upload is left to the purger: %s", new.id, exc)

    async def finish(
        self,
        pending: FileRecord,
        chunks: AsyncIterable[bytes],
        *,
        check: Callable[[], bool] | None = None,
    ) -> FileRecord | None:
        """Writes the bytes of a pending file and makes it visible, unless
        ``check()``, asked once the bytes are written, says they are not the
        file's (None: the row stays pending, for the purger). Writing the same
        bytes again (a capture cut short) is harmless: the blob is replaced
        whole. ``NotFound`` if the purger took the row meanwhile."""
        await self._write_blob(pending.blob_key, pending.size_bytes, chunks)
        if check is not None and not check():
            return None
        try:
            return await self._store.file_ready(pending.workspace_id, pending.id)
        except NotFound:
            await self.abandon(pending)
            raise

    async def _write_blob(self, key: str, size_bytes: int, chunks: AsyncIterable[bytes]) -> None:
        if self._failpoints.armed:
            chunks = self._watched(chunks)
        written = await self.blob_store().put_stream(key, chunks)
        if written.size != size_bytes:  # the caller counted what it sent; never expected
            raise BlobError(f"blob {key!r} holds {written.size} bytes, not {size_bytes}")

    async def _watched(self, chunks: AsyncIterable[bytes]) -> AsyncIterator[bytes]:
        """``chunks``, hitting ``files.blob_chunk`` once the blob store took each."""
        async for chunk in chunks:
            yield chunk
            self._failpoints.hit("files.blob_chunk")

    async def abandon(self, staged: NewFile | FileRecord) -> None:
        """Removes the blob of a staged file whose row the purger already took
        (it ran past the grace): nothing names the blob now, so it goes here."""
        with anyio.CancelScope(shield=True):
            await self.blob_store().delete(staged.blob_key)

    async def blob(self, blob_key: str) -> AsyncIterator[bytes]:
        """The bytes of a file row's blob in chunks, for an aggregate that keeps
        its own files (skills): each chunk bounded by the blob store's timeout."""
        return await self.blob_store().get_stream(blob_key)

    async def remove(self, tombstones: Sequence[FileRecord]) -> None:
        """Removes the blobs and rows of files another aggregate tombstoned; a
        blob store failure leaves the tombstone for the purger."""
        with anyio.CancelScope(shield=True):  # bounded by the blob store's timeout
            for record in tombstones:
                await self._remove(record)

    async def content(
        self, workspace_id: str, file_id: str
    ) -> tuple[FileRecord, AsyncIterator[bytes]]:
        """A visible file and its bytes in chunks (``NotFound``, ``FileExpired``,
        ``BlobError``), each chunk bounded by the blob store's timeout."""
        record = await self._store.get_file(workspace_id, file_id)
        if record.expires_at is not None and record.expires_at <= self._clock.now():
            raise FileExpired(file_id)
        return record, await self.blob_store().get_stream(record.blob_key)

    async def delete(self, workspace_id: str, file_id: str) -> FileRecord:
        """Deletes a visible file (``NotFound`` otherwise). Once the tombstone is
        committed the delete has happened; removing the bytes is retried by the
        purger if the blob store fails now (or the request is cancelled)."""
        record = await self._store.delete_file(workspace_id, file_id)
        with anyio.CancelScope(shield=True):  # bounded by the blob store's timeout
            await self._remove(record)
        return record

    async def _remove(self, record: FileRecord) -> bool:
        return await self._remove_blob(record, self._store.forget_file)

    async def _remove_blob(
        self, record: FileRecord, then: Callable[[str], Awaitable[None]]
    ) -> bool:
        """Removes the blob, then records it with ``then(file id)``; False (and
        nothing recorded) if the blob store fails: the next round retries."""
        try:
            await self.blob_store().delete(record.blob_key)
        except BlobError as exc:
            log.warning("file %s: blob not removed yet, will retry: %s", record.id, exc)
            return False
        await then(record.id)
        return True

    async def purge(self) -> int:
        """Removes the blobs and rows of deleted files and of uploads abandoned
        for longer than the grace, and the blobs of expired files; returns how
        many blobs went. Failures stay for the next round."""
        removed = await purge_in_batches(self._terms, self._store.files_to_purge, self._remove)
        return removed + await purge_in_batches(
            self._terms, self._expired_files, self._remove_expired
        )

    async def _expired_files(self, _pending_before: datetime, limit: int) -> list[FileRecord]:
        return await self._store.expired_files(self._clock.now(), limit)

    async def _remove_expired(self, record: FileRecord) -> bool:
        # Blob first, then the mark: a crash between leaves the file to the next
        # round, which removes the (missing) blob again harmlessly.
        return await self._remove_blob(record, self._store.bytes_removed)

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Purges every ``purge_interval`` until cancelled (``purging.purge_every``)."""
        await purge_every(self._terms, self.purge, task_status)


def new_file(
    workspace_id: str,
    filename: str,
    mime_type: str,
    size_bytes: int,
    expires_at: datetime | None = None,
    scope: FileScope | None = None,
) -> NewFile:
    """A new file's row: its id, and its blob's key in the blob store."""
    file_id = new_id("file")
    key = f"{KEY_PREFIX}/{workspace_id}/{file_id}"
    return NewFile(file_id, workspace_id, filename, mime_type, size_bytes, key, expires_at, scope)
