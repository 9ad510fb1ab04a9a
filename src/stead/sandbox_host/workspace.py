"""A sandbox's workspace on disk and in the blob store (rule 6).

The directory is on the sandbox's disk (``disk.py``), which its caller holds
mounted; the warm marker, beside the disk, says the directory is current;
without it the workspace is restored from the latest snapshot, or made empty
for a sandbox that never had one. Saving takes a snapshot, verifies it (``snapshots.py``),
records it, and only then drops the older snapshots, the marker and the
directory. A snapshot that cannot be restored is ``WorkspaceUnavailable``,
never an empty workspace, and so is one that does not fit the disk; a blob
store outage is ``SandboxUnavailable`` (retryable), not a lost workspace.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from functools import partial
from pathlib import Path

from anyio import to_thread

from stead.blobs import BlobError, BlobStore
from stead.failpoints import FailPoints
from stead.sandbox import SandboxNotFound, SandboxUnavailable, WorkspaceUnavailable
from stead.sandbox_host.catalogue import Catalogue, SnapshotRow
from stead.sandbox_host.clock import HostClock
from stead.sandbox_host.placements import (
    erased_key,
    newest_placement,
    sandbox_prefix,
    write_manifest,
)
from stead.sandbox_host.snapshots import (
    SnapshotError,
    SnapshotInfo,
    restore_snapshot,
    take_snapshot,
)
from stead.sandbox_host.trees import remove_tree

log = logging.getLogger("stead.sandbox.host")


class SandboxErased(SandboxNotFound):
    """The sandbox was erased (its session deleted) while this host held a copy
    of it, as a host that lost it to another may: what the copy had just saved
    is deleted again, and the copy must go too."""


class SavedWorkspace:
    def __init__(
        self,
        sandbox_id: str,
        uid: int,
        root: Path,
        directory: Path,
        *,
        catalogue: Catalogue,
        blobs: BlobStore,
        snapshot_ttl_seconds: float,
        clock: HostClock,
        failpoints: FailPoints | None = None,
    ) -> None:
        self._clock = clock
        self._failpoints = failpoints
        self._id = sandbox_id
        self._uid = uid
        self._root = root
        self.directory = directory
        self._marker = root / "warm"
        self._catalogue = catalogue
        self._blobs = blobs
        self._ttl = snapshot_ttl_seconds
        self.placement: int | None = None
        """The placement this copy belongs to (``placements.py``); each snapshot's
        manifest is written under it (0 for a copy never placed)."""

    @property
    def is_warm(self) -> bool:
        """The directory on disk is the current workspace (a snapshot may hold
        an older state, or, after a checkpoint, the same)."""
        return self._marker.exists()

    async def prepare(self) -> None:
        """Makes the directory current: as it is, restored, or new and empty."""
        if await to_thread.run_sync(self._current):
            return
        latest = await self.latest()
        # Not current: a directory still there (a host killed mid-drop) only
        # takes the room on the disk that the restore needs.
        await to_thread.run_sync(partial(remove_tree, self.directory, ignore_errors=True))
        if latest is None:
            await to_thread.run_sync(self._make_empty)
        else:
            info = SnapshotInfo(latest.blob_key, latest.size, latest.sha256)
            try:
                await restore_snapshot(
                    self._blobs, info, self.directory, owner=(self._uid, self._uid)
                )
            except SnapshotError as exc:
                raise WorkspaceUnavailable(
                    f"the sandbox's saved workspace cannot be restored: {exc}"
                ) from None
            except BlobError as exc:
                raise SandboxUnavailable(f"the blob store is unavailable: {exc}") from None
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                raise WorkspaceUnavailable(
                    "the sandbox's saved workspace does not fit its disk "
                    "(STEAD_SANDBOX_DISK_MB on its host)"
                ) from None
        await to_thread.run_sync(self._marker.touch)

    def _current(self) -> bool:
        if not self._marker.exists():
            return False
        if self.directory.is_dir():
            return True
        log.warning("sandbox %s: warm, but its workspace is not on its disk", self._id)
        self._marker.unlink()
        return False

    def _make_empty(self) -> None:
        self.directory.mkdir(exist_ok=True)
        os.chown(self.directory, self._uid, self._uid)
        os.chmod(self.directory, 0o755)

    async def save(self) -> None:
        """Snapshots the directory, then drops it. Raises if the snapshot could
        not be taken and verified; the directory and the marker then stay."""
        await self.checkpoint()
        await to_thread.run_sync(self._drop)

    async def checkpoint(self) -> SnapshotRow:
        """Snapshots the directory as it is and keeps it: the new snapshot, once
        verified and recorded, replaces the older ones. ``SandboxErased`` if the
        sandbox was erased meanwhile, through this host or another."""
        await self._refuse_if_erased()  # before the upload, which would be wasted
        snapshot_id = f"snap_{time.time_ns():x}"
        key = f"{sandbox_prefix(self._id)}/{snapshot_id}.tar.zst"
        try:
            info = await take_snapshot(
                self.directory, self._blobs, key, failpoints=self._failpoints
            )
        except SnapshotError:
            await self._refuse_if_erased()  # an erase deleted the upload under it
            raise
        now = self._clock.time()
        row = SnapshotRow(
            snapshot_id, self._id, info.key, info.size, info.sha256, now, now + self._ttl, None
        )
        await self._catalogue.add_snapshot(row)
        try:
            await write_manifest(self._blobs, self.placement or 0, row)
        except BlobError as exc:
            raise SandboxUnavailable(f"the blob store is unavailable: {exc}") from None
        # Read again after the writes: an erase that listed the blobs before
        # they were written had put its marker before listing, so it is seen now.
        await self._refuse_if_erased()
        # Only a verified newer snapshot, named in its manifest, makes the older
        # ones replaceable; and only in the current copy: a newer placement
        # (another host's) may be about to restore one of them. A stale copy's
        # go when they expire.
        if not await self._is_current():
            return row
        for old in await self._catalogue.replaceable_snapshots(self._id, keep=snapshot_id):
            with contextlib.suppress(Exception):
                await self._blobs.delete(old.blob_key)
            await self._catalogue.mark_snapshot_deleted(old.id, now=now)
        return row

    async def _is_current(self) -> bool:
        """No host claimed a newer placement of the sandbox than this copy's."""
        try:
            newest = await newest_placement(self._blobs, self._id)
        except BlobError as exc:
            raise SandboxUnavailable(f"the blob store is unavailable: {exc}") from None
        return newest is None or newest <= (self.placement or 0)

    async def latest(self) -> SnapshotRow | None:
        """The snapshot that holds the workspace; None if there never was one.
        ``WorkspaceUnavailable`` if the newest one expired (deleted, or about to be)."""
        latest = await self._catalogue.latest_snapshot(self._id)
        # Expired is expired from that moment, whether or not the collector has
        # deleted it yet (it deletes the blob before it marks the row).
        if latest is not None and (
            latest.deleted_at is not None or latest.expires_at <= self._clock.time()
        ):
            raise WorkspaceUnavailable(
                "the sandbox's saved workspace expired; it cannot be restored"
            )
        return latest

    async def _refuse_if_erased(self) -> None:
        """Raises ``SandboxErased`` if an erase left its marker, after deleting
        the sandbox's blobs and rows again (what this copy saved among them).
        The copy on disk goes with the body, which may still run: the caller
        destroys the sandbox (``SandboxManager.saving``)."""
        try:
            erased = await self._blobs.head(erased_key(self._id)) is not None
        except BlobError as exc:
            raise SandboxUnavailable(f"the blob store is unavailable: {exc}") from None
        if erased:
            await erase_snapshots(self._blobs, self._catalogue, self._id)
            raise SandboxErased(f"sandbox {self._id} was erased; this host's copy goes too")

    def _drop(self) -> None:
        self._marker.unlink(missing_ok=True)
        remove_tree(self.directory, ignore_errors=True)

    async def discard(self) -> None:
        """Drops the directory on disk unsaved: it is not the current workspace
        (the sandbox was placed elsewhere since), the latest snapshot is."""
        await to_thread.run_sync(self._drop)

    def remove(self) -> None:
        """Every trace on this machine (after a final save)."""
        remove_tree(self._root, ignore_errors=True)

    async def erase(self) -> None:
        """Every trace, here and in the blob store, with nothing saved first."""
        await to_thread.run_sync(self.remove)
        await erase_snapshots(self._blobs, self._catalogue, self._id)


async def erase_snapshots(blobs: BlobStore, catalogue: Catalogue, sandbox_id: str) -> None:
    """Deletes every snapshot and manifest of the sandbox in the blob store (any
    host's), and what uploads of them left unfinished on the local store (a
    host killed mid-snapshot: no listing shows it; on S3 the bucket's
    lifecycle rule frees those), then this host's rows of them. Blobs
    first: a failure between leaves rows whose blobs are gone (the workspace
    reads as expired), never a blob that no row names and so nothing would
    ever delete. The erased marker goes in before the listing, and stays
    (``checkpoint`` reads it)."""
    marker = erased_key(sandbox_id)
    prefix = sandbox_prefix(sandbox_id)
    try:
        await blobs.put_bytes(marker, b"")
        for info in await blobs.list(prefix):
            if info.key != marker:
                await blobs.delete(info.key)
        for upload in await blobs.unfinished_uploads(prefix):
            await blobs.abort_upload(upload)
    except BlobError as exc:
        raise SandboxUnavailable(f"the blob store is unavailable: {exc}") from None
    await catalogue.drop_snapshots(sandbox_id)
