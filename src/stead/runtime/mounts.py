"""``SessionMounts``: a session's file resources in its sandbox, and its outputs
back into the Files API.

* Staging puts each ``file`` resource read-only at its ``mount_path`` under
  ``/mnt/session/uploads`` (only what differs from what the sandbox holds),
  removes files of resources since deleted, and makes ``/mnt/session/outputs``
  writable. The toolbox stages before a session's first sandbox call in this
  process and again after each turn and each change of its resources.
* Staging also puts the agent's skills read-only under ``/mnt/skills/<name>``,
  which the sandbox host binds at ``/workspace/skills`` for an agent with
  skills (``SandboxConfig.skills``), and removes skills the agent no longer has.
* Capturing reads what the agent wrote under ``/mnt/session/outputs`` and files
  each distinct content of each path once, with ``scope {type: "session"}``:
  the store's outputs ledger begins the file before its bytes are written, so a
  capture cut short (a crash) is finished by the next one, never doubled. A
  rewritten file is a new file; the earlier content's file stays. An output
  that would take the workspace past its file storage quota is left in the
  sandbox (the next capture tries again) and named in the capture's refusal.
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
import posixpath
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Protocol

from stead.blobs import BlobError, BlobNotFound
from stead.failpoints import FailPoints
from stead.mount_paths import directories_of
from stead.runtime.bounded import Bounded
from stead.runtime.files import FileExpired, FileKeeper, new_file
from stead.runtime.together import together
from stead.sandbox import (
    FileTooLarge,
    MountedFile,
    MountFile,
    SandboxConfig,
    SandboxMounts,
    SandboxUnavailable,
)
from stead.store import (
    FileScope,
    FileStore,
    NotFound,
    SessionRecord,
    SessionResourceStore,
    SessionStore,
    StorageQuotaExceeded,
)

log = logging.getLogger("stead.runtime.mounts")

SkillFiles = Callable[[SessionRecord], Awaitable[dict[str, list[MountFile]]]]
"""Skill name -> its files (paths inside the skill) for a session (``SkillKeeper.mount_files``)."""

SKILLS = "/mnt/skills"
UPLOADS = "/mnt/session/uploads"
OUTPUTS = "/mnt/session/outputs"
MAX_MOUNTED_BYTES = 500 * 1024 * 1024
"""The default largest file mounted or captured (``STEAD_MAX_MOUNTED_FILE_BYTES``);
the bytes cross the host protocol in parts, never whole."""
DIGESTS_KEPT = 65_536
"""Mounted files whose digest is remembered (about 200 bytes each): a server
that runs for months mounts more files than it should remember."""


@dataclass
class Captured:
    """What one capture filed, and the outputs it left for lack of quota."""

    files: list[str] = field(default_factory=list)
    """Ids of the files it made ready."""
    refused: list[str] = field(default_factory=list)
    """Paths under ``OUTPUTS`` over the workspace's file storage quota."""
    quota: int = 0

    def refusal(self) -> str | None:
        """The ``session.error`` message for the refused outputs, if any."""
        if not self.refused:
            return None
        return (
            f"outputs not captured: {', '.join(self.refused)} would take the workspace past"
            f" its file storage quota of {self.quota} bytes; they stay in the sandbox and"
            " are captured after a later turn once files are deleted or the quota is raised"
        )


class MountsStore(SessionStore, FileStore, SessionResourceStore, Protocol):
    """What staging a session's files and capturing its outputs use: the
    session's resources and the files they name."""


class SessionMounts:
    def __init__(
        self,
        store: MountsStore,
        mounts: SandboxMounts,
        files: FileKeeper,
        failpoints: FailPoints,
        *,
        skills: SkillFiles | None = None,
        max_file_bytes: int = MAX_MOUNTED_BYTES,
    ) -> None:
        self._store = store
        self._skills = skills
        self._max_bytes = max_file_bytes
        self._failpoints = failpoints
        self._mounts = mounts
        self._files = files
        self._digests: Bounded[str, str] = Bounded(DIGESTS_KEPT)
        """file id -> sha256 of its bytes (files never change), so staging an
        unchanged resource reads nothing from the blob store."""

    async def stage(self, session_id: str, config: SandboxConfig) -> None:
        """Makes the sandbox's uploads match the session's file resources and
        its outputs directory writable. A resource whose file is gone is left
        out (and logged); the others are staged."""
        # Three round trips that need nothing of each other (the uploads listed
        # and the outputs made are different directories): one's time.
        session, listed, _ = await together(
            lambda: self._store.session_snapshot(session_id),
            lambda: self._mounts.listing(session_id, UPLOADS),
            lambda: self._mounts.put(session_id, config, OUTPUTS, [], writable=True),
        )
        wanted = {
            _relative(str(r["mount_path"])): str(r["file_id"])
            for r in session.resources
            if r.get("type") == "file"
        }
        held = {f.path: f for f in listed.files}
        now = self._files.now()
        # Most sessions mount no files: no read for them.
        files = (
            await self._store.files_by_ids(session.workspace_id, list(wanted.values()))
            if wanted
            else []
        )
        live = {f.id for f in files if f.expires_at is None or f.expires_at > now}
        gone = {path for path, file_id in wanted.items() if file_id not in live}
        # What is stale goes first: a new resource may be mounted where an
        # earlier one's directory was (``a`` after ``a/b``), or below its file.
        kept = [path for path in wanted if path not in gone]
        if stale := _stale(held, kept):
            await self._mounts.remove(session_id, UPLOADS, stale)
        failed: list[str] = []
        for path, file_id in wanted.items():
            found = held.get(path)
            if path in gone:
                continue
            if found is not None and self._digests.use(file_id) == found.sha256:
                continue
            if not await self._put_file(session_id, config, session.workspace_id, path, file_id):
                failed.append(path)
        if held_failed := [path for path in failed if path in held]:
            mounted = [path for path in kept if path not in failed]
            await self._mounts.remove(session_id, UPLOADS, _stale(held_failed, mounted))
        if self._skills is not None and session.agent.get("skills"):
            await self._stage_skills(self._skills, session, config)

    async def _stage_skills(
        self, skills: SkillFiles, session: SessionRecord, config: SandboxConfig
    ) -> None:
        """Makes ``/mnt/skills`` hold exactly the agent's skills as they resolve now."""
        wanted = {
            f"{name}/{file.path}": file
            for name, files in (await skills(session)).items()
            for file in files
        }
        listed = await self._mounts.listing(session.id, SKILLS)
        held = {f.path: (f.sha256, f.executable) for f in listed.files}
        changed = [
            MountFile(path, file.data, executable=file.executable)
            for path, file in wanted.items()
            if held.get(path) != (hashlib.sha256(file.data).hexdigest(), file.executable)
        ]
        # What is stale goes first: a skill's new version may hold a file where
        # the old one had a directory, or the other way round.
        stale = _stale(held, wanted)
        if stale:
            await self._mounts.remove(session.id, SKILLS, stale)
        if changed:
            await self._mounts.put(session.id, config, SKILLS, changed, writable=False)

    async def _put_file(
        self, session_id: str, config: SandboxConfig, workspace_id: str, path: str, file_id: str
    ) -> bool:
        """Streams a file's bytes from the blob store to ``path`` under ``UPLOADS``;
        False if the file is gone or too large to mount."""
        digest = hashlib.sha256()
        try:
            record, chunks = await self._files.content(workspace_id, file_id)
            if record.size_bytes > self._max_bytes:
                log.warning("file %s is over %d bytes; not mounted", file_id, self._max_bytes)
                return False
            source = _hashed(chunks, digest.update)
            await self._mounts.put_stream(session_id, config, UPLOADS, path, source, writable=False)
        except (NotFound, FileExpired):
            log.warning("file %s of a session resource is gone; not mounted", file_id)
            return False
        except BlobNotFound:
            # Its bytes are gone from the blob store (removed behind stead's
            # back): as gone as a deleted file, however often it is tried.
            log.error("file %s has no bytes in the blob store; not mounted", file_id)
            return False
        except BlobError as exc:  # retryable: the turn waits and tries again
            raise SandboxUnavailable(f"the blob store is unavailable: {exc}") from None
        self._digests.put(file_id, digest.hexdigest())
        return True

    async def capture(self, session_id: str, workspace_id: str) -> Captured:
        """Files what the sandbox holds under ``OUTPUTS`` that was never filed.
        Never wakes the sandbox."""
        captured = Captured()
        listed = await self._mounts.listing(session_id, OUTPUTS)
        if listed.truncated:
            log.warning(
                "the outputs of %s hold more entries than one listing visits; "
                "%d files captured this time",
                session_id,
                len(listed.files),
            )
        for found in listed.files:
            if found.size > self._max_bytes:
                log.warning("output %s of %s is too large to capture", found.path, session_id)
                continue
            try:
                file_id = await self._capture_one(session_id, workspace_id, found)
            except StorageQuotaExceeded as exc:
                log.warning("output %s of %s not captured: %s", found.path, session_id, exc)
                captured.refused.append(found.path)
                captured.quota = exc.quota
                continue
            if file_id is not None:
                captured.files.append(file_id)
        return captured

    async def _capture_one(
        self, session_id: str, workspace_id: str, found: MountedFile
    ) -> str | None:
        name = posixpath.basename(found.path)
        mime_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
        scope = FileScope("session", session_id)
        new = new_file(workspace_id, name, mime_type, found.size, scope=scope)
        record = await self._store.begin_output(
            new, session_id, found.path, found.sha256, quota=self._files.quota_bytes
        )
        if record is None or record.ready_at is not None:
            return None  # filed before, or filed and deleted since
        self._failpoints.hit("outputs.after_begin")
        digest = hashlib.sha256()
        chunks = self._mounts.read_stream(session_id, OUTPUTS, found.path, max_bytes=found.size)

        def unchanged() -> bool:
            return digest.hexdigest() == found.sha256

        try:
            filed = await self._files.finish(
                record, _hashed(_sized(chunks, found.size), digest.update), check=unchanged
            )
        except (_Changed, FileTooLarge):
            filed = None
        if filed is None:
            # Rewritten since it was listed: the pending file stays for the
            # purger (with the blob written, if any), and the next capture
            # files the new content.
            return None
        self._failpoints.hit("outputs.after_capture")
        return record.id


def _stale(held: Collection[str], wanted: Collection[str]) -> list[str]:
    """What to remove for a mount holding the files ``held`` to hold ``wanted``:
    each directory no wanted file needs, whole (its files alone would leave it
    there, empty: a skill the agent no longer has, or the folder of a file
    resource deleted, would still show), and each other held file that is not
    wanted."""
    unneeded = directories_of(held) - directories_of(wanted)
    tops = sorted(d for d in unneeded if posixpath.dirname(d) not in unneeded)
    inside = tuple(f"{top}/" for top in tops)
    return tops + [path for path in held if path not in wanted and not path.startswith(inside)]


def _relative(mount_path: str) -> str:
    return mount_path.removeprefix(UPLOADS + "/")


class _Changed(Exception):
    """An output's size changed while it was read."""


async def _hashed(
    chunks: AsyncIterator[bytes], update: Callable[[bytes], object]
) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        update(chunk)
        yield chunk


async def _sized(chunks: AsyncIterator[bytes], size: int) -> AsyncIterator[bytes]:
    """``chunks``, which must come to ``size`` bytes (``_Changed`` otherwise)."""
    seen = 0
    async for chunk in chunks:
        seen += len(chunk)
        yield chunk
    if seen != size:
        raise _Changed
