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
  rewritten file is a new file; the earlier content's file stays.
"""

from __future__ import annotations

import hashlib
import logging
import mimetypes
import posixpath
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from stead.blobs import BlobError
from stead.failpoints import FailPoints
from stead.ids import new_id
from stead.runtime.files import KEY_PREFIX, FileExpired, FileKeeper
from stead.sandbox import (
    MountedFile,
    MountFile,
    SandboxConfig,
    SandboxMounts,
    SandboxUnavailable,
)
from stead.store import (
    FileScope,
    FileStore,
    NewFile,
    NotFound,
    SessionRecord,
    SessionResourceStore,
    SessionStore,
)

log = logging.getLogger("stead.runtime.mounts")

SkillFiles = Callable[[SessionRecord], Awaitable[dict[str, dict[str, bytes]]]]
"""Skill name -> (path inside the skill -> bytes) for a session (``SkillKeeper.mount_files``)."""

SKILLS = "/mnt/skills"
UPLOADS = "/mnt/session/uploads"
OUTPUTS = "/mnt/session/outputs"
MAX_MOUNTED_BYTES = 32 * 1024 * 1024
"""The largest file mounted or captured: one host protocol frame carries it."""


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
    ) -> None:
        self._store = store
        self._skills = skills
        self._failpoints = failpoints
        self._mounts = mounts
        self._files = files
        self._digests: dict[str, str] = {}
        """file id -> sha256 of its bytes (files never change), so staging an
        unchanged resource reads nothing from the blob store."""

    async def stage(self, session_id: str, config: SandboxConfig) -> None:
        """Makes the sandbox's uploads match the session's file resources and
        its outputs directory writable. A resource whose file is gone is left
        out (and logged); the others are staged."""
        session = await self._store.session_snapshot(session_id)
        wanted = {
            _relative(str(r["mount_path"])): str(r["file_id"])
            for r in session.resources
            if r.get("type") == "file"
        }
        held = {f.path: f for f in await self._mounts.listing(session_id, UPLOADS)}
        await self._mounts.put(session_id, config, OUTPUTS, [], writable=True)
        now = self._files.now()
        live = {
            f.id
            for f in await self._store.files_by_ids(session.workspace_id, list(wanted.values()))
            if f.expires_at is None or f.expires_at > now
        }
        gone = {path for path, file_id in wanted.items() if file_id not in live}
        for path, file_id in wanted.items():
            found = held.get(path)
            if path in gone:
                continue
            if found is not None and self._digests.get(file_id) == found.sha256:
                continue
            data = await self._read_file(session.workspace_id, file_id)
            if data is None:
                gone.add(path)
                continue
            await self._mounts.put(
                session_id, config, UPLOADS, [MountFile(path, data)], writable=False
            )
        stale = [path for path in held if path not in wanted or path in gone]
        if stale:
            await self._mounts.remove(session_id, UPLOADS, stale)
        if self._skills is not None and session.agent.get("skills"):
            await self._stage_skills(self._skills, session, config)

    async def _stage_skills(
        self, skills: SkillFiles, session: SessionRecord, config: SandboxConfig
    ) -> None:
        """Makes ``/mnt/skills`` hold exactly the agent's skills as they resolve now."""
        wanted = {
            f"{name}/{path}": data
            for name, files in (await skills(session)).items()
            for path, data in files.items()
        }
        held = {f.path: f.sha256 for f in await self._mounts.listing(session.id, SKILLS)}
        changed = [
            MountFile(path, data)
            for path, data in wanted.items()
            if held.get(path) != hashlib.sha256(data).hexdigest()
        ]
        if changed:
            await self._mounts.put(session.id, config, SKILLS, changed, writable=False)
        stale = [path for path in held if path not in wanted]
        if stale:
            await self._mounts.remove(session.id, SKILLS, stale)

    async def _read_file(self, workspace_id: str, file_id: str) -> bytes | None:
        try:
            record, chunks = await self._files.content(workspace_id, file_id)
            if record.size_bytes > MAX_MOUNTED_BYTES:
                log.warning("file %s is over %d bytes; not mounted", file_id, MAX_MOUNTED_BYTES)
                return None
            data = b"".join([chunk async for chunk in chunks])
        except (NotFound, FileExpired):
            log.warning("file %s of a session resource is gone; not mounted", file_id)
            return None
        except BlobError as exc:  # retryable: the turn waits and tries again
            raise SandboxUnavailable(f"the blob store is unavailable: {exc}") from None
        self._digests[file_id] = hashlib.sha256(data).hexdigest()
        return data

    async def capture(self, session_id: str, workspace_id: str) -> list[str]:
        """Files what the sandbox holds under ``OUTPUTS`` that was never filed;
        the ids of the files it finished. Never wakes the sandbox."""
        finished = []
        for found in await self._mounts.listing(session_id, OUTPUTS):
            if found.size > MAX_MOUNTED_BYTES:
                log.warning("output %s of %s is too large to capture", found.path, session_id)
                continue
            file_id = await self._capture_one(session_id, workspace_id, found)
            if file_id is not None:
                finished.append(file_id)
        return finished

    async def _capture_one(
        self, session_id: str, workspace_id: str, found: MountedFile
    ) -> str | None:
        file_id = new_id("file")
        name = posixpath.basename(found.path)
        new = NewFile(
            id=file_id,
            workspace_id=workspace_id,
            filename=name,
            mime_type=mimetypes.guess_type(name)[0] or "application/octet-stream",
            size_bytes=found.size,
            blob_key=f"{KEY_PREFIX}/{workspace_id}/{file_id}",
            scope=FileScope("session", session_id),
        )
        record = await self._store.begin_output(new, session_id, found.path, found.sha256)
        if record is None or record.ready_at is not None:
            return None  # filed before, or filed and deleted since
        self._failpoints.hit("outputs.after_begin")
        data = await self._mounts.read(session_id, OUTPUTS, found.path, max_bytes=MAX_MOUNTED_BYTES)
        if hashlib.sha256(data).hexdigest() != found.sha256:
            # Rewritten since it was listed: the pending file stays for the
            # purger, and the next capture files the new content.
            return None
        await self._files.finish(record, _once(data))
        self._failpoints.hit("outputs.after_capture")
        return record.id


def _relative(mount_path: str) -> str:
    return mount_path.removeprefix(UPLOADS + "/")


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data
