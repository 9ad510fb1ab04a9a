"""The file aggregate: metadata of the Files API, and the narrow protocol for it.

The bytes live in the blob store under ``FileRecord.blob_key``; the store only
says which blob a file is and whether it may be shown. A file row goes
``pending`` (its blob is being written) -> ``ready`` (visible) -> ``deleted`` (a
tombstone: its blob is being removed) -> gone. Only ready rows are visible to
``get_file``/``list_files``; every other state is the purger's to finish. A ready
file whose ``expires_at`` passed stays visible, and the purger removes its blob
and records that (``bytes_removed_at``).

Quota: the files of a workspace that hold bytes (pending or ready, not expired,
not deleted; skill versions aside) may hold at most its quota together. A new
file is counted from ``begin_file`` on, in the transaction that checks it, so
uploads side by side cannot pass it together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # base.py builds Store on FileStore, so only types come from it
    from stead.store.paging import Page, PageRequest


@dataclass(frozen=True, slots=True)
class FileScope:
    """What a file was made for (``{type: "session", id}``); uploads have none."""

    type: str
    id: str


@dataclass(frozen=True, slots=True)
class NewFile:
    """A file about to be written: its id and blob key are chosen by the caller."""

    id: str
    workspace_id: str
    filename: str
    mime_type: str
    size_bytes: int
    blob_key: str
    expires_at: datetime | None = None
    scope: FileScope | None = None


@dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    workspace_id: str
    filename: str
    mime_type: str
    size_bytes: int
    blob_key: str
    scope: FileScope | None
    created_at: datetime
    expires_at: datetime | None
    ready_at: datetime | None
    deleted_at: datetime | None
    bytes_removed_at: datetime | None = None


class FileStore(Protocol):
    async def begin_file(self, new: NewFile, *, quota: int = 0) -> FileRecord:
        """Records ``new`` as pending (invisible) before its blob is written, so
        no blob exists that no row names. A pending row older than the purger's
        grace is tombstoned and collected. ``quota``: the workspace's byte quota
        when it sets no ``file_storage_bytes`` limit of its own (0: none);
        ``StorageQuotaExceeded`` if ``new`` does not fit, and nothing is written."""
        ...

    async def file_ready(self, workspace_id: str, file_id: str) -> FileRecord:
        """Makes a pending file visible once its blob is complete. ``NotFound``
        if the row was tombstoned meanwhile (the caller removes the blob)."""
        ...

    async def get_file(self, workspace_id: str, file_id: str) -> FileRecord:
        """A visible file of the workspace; ``NotFound`` otherwise (another
        workspace's, pending and deleted files look the same)."""
        ...

    async def list_files(
        self, workspace_id: str, page: PageRequest, scope_id: str | None
    ) -> Page[FileRecord]:
        """Visible files, by (created_at, id) in ``page.order``; ``scope_id`` keeps
        only the files of that scope."""
        ...

    async def files_by_ids(self, workspace_id: str, file_ids: Sequence[str]) -> list[FileRecord]:
        """The visible files among ``file_ids``, newest first; unknown ids are skipped."""
        ...

    async def delete_file(self, workspace_id: str, file_id: str) -> FileRecord:
        """Tombstones a visible file (it is gone for every reader at commit) and
        returns it, so the caller can remove its blob and then ``forget_file``.
        ``NotFound`` if it is not visible (deleting twice is a 404)."""
        ...

    async def files_to_purge(self, pending_before: datetime, limit: int) -> list[FileRecord]:
        """Tombstones pending files begun before ``pending_before`` (their upload
        died) and returns up to ``limit`` tombstones, oldest first, across
        workspaces: each one's blob is to be removed, then ``forget_file``."""
        ...

    async def expired_files(self, now: datetime, limit: int) -> list[FileRecord]:
        """Up to ``limit`` ready files, across workspaces, whose ``expires_at`` is
        at or before ``now`` and whose blob is still there, oldest expiry first."""
        ...

    async def bytes_removed(self, file_id: str) -> None:
        """Records that an expired file's blob is gone (once; a file deleted
        meanwhile or marked by another purger is left alone)."""
        ...

    async def abandon_file(self, file_id: str) -> FileRecord | None:
        """Tombstones a pending file whose blob could not be written (it stops
        counting against the quota at once) and returns it, for the caller to
        remove its blob and then ``forget_file``; None if it is not pending."""
        ...

    async def forget_file(self, file_id: str) -> None:
        """Removes a tombstoned row (its blob is gone). A row that is not a
        tombstone is left alone; a missing one is not an error (another purger)."""
        ...
