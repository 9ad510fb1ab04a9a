"""Custom skills: ``SkillKeeper`` keeps their versions (each a zip, staged and
purged through ``FileKeeper``; metadata in the store) and hands out what an
agent's skills are (``resolve_skills``: the prompt) and hold (``mount_files``:
the sandbox's ``/workspace/skills/<name>``).

An agent names skills by id and version, or ``latest``; each turn resolves
them again, so a new version takes effect at the next turn of every session
whose agent asks for ``latest``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio

from stead.failpoints import FailPoints
from stead.jsonvalues import Json
from stead.runtime.files import FileKeeper
from stead.sandbox import MountFile
from stead.schemas import RequestError, SkillLimits, skills
from stead.store import (
    SKILL_SCOPE,
    FileScope,
    NewFile,
    NewSkillVersion,
    NotFound,
    SessionRecord,
    SkillRecord,
    SkillStore,
    SkillVersionRecord,
    skill_name_changed,
    skill_name_taken,
)

log = logging.getLogger("stead.runtime.skills")
ZIP_TYPE = "application/zip"
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class ResolvedSkills:
    versions: list[SkillVersionRecord]
    """The versions the references name, in the agent's order."""
    missing: list[str]
    """What could not be found (deleted since the agent named it), one line each."""


async def resolve_skills(
    store: SkillStore, workspace_id: str, refs: Sequence[Json]
) -> ResolvedSkills:
    """The versions an agent's ``skills`` name now (``latest`` is the newest)."""
    found: list[SkillVersionRecord] = []
    missing: list[str] = []
    for ref in refs:
        try:
            found.append(
                await store.get_skill_version(workspace_id, ref["skill_id"], ref["version"])
            )
        except NotFound:
            missing.append(f"skill {ref['skill_id']} version {ref['version']} no longer exists")
    return ResolvedSkills(found, missing)


async def check_skill_refs(
    store: SkillStore, workspace_id: str, refs: Sequence[Json], field: str
) -> None:
    """A 400 naming ``field.<i>`` for a reference to no skill (or version) of the workspace."""
    for i, ref in enumerate(refs):
        try:
            await store.get_skill_version(workspace_id, ref["skill_id"], ref["version"])
        except NotFound as exc:
            what = "skill_id" if exc.kind == "skill" else "version"
            raise RequestError(
                f"{field}.{i}.{what}: no {exc.kind} {exc.ident!r} in this workspace "
                "(create it with POST /v1/skills)"
            ) from None


class SkillKeeper:
    def __init__(
        self,
        store: SkillStore,
        files: FileKeeper,
        limits: SkillLimits,
        failpoints: FailPoints | None = None,
    ) -> None:
        self._store = store
        self._files = files
        self._limits = limits
        self._failpoints = failpoints or FailPoints(None)

    @property
    def limits(self) -> SkillLimits:
        return self._limits

    async def create(
        self,
        workspace_id: str,
        skill_id: str,
        parts: Sequence[tuple[str, bytes]],
        label: str | None,
    ) -> tuple[SkillRecord, SkillVersionRecord]:
        """A new skill from its first upload (``RequestError`` for a bad one;
        ``Conflict`` ``skill_name_taken`` if the workspace has the name)."""
        found = await self._bundle(parts)
        shown = skills.display_name(label, found.name)
        if await self._store.skill_named(workspace_id, found.name) is not None:
            raise skill_name_taken(found.name)  # checked again when it is recorded
        staged = await self._stage(workspace_id, skill_id, found)
        return await self._record(
            staged, lambda new: self._store.create_skill(skill_id, shown, new), found
        )

    async def add_version(
        self, workspace_id: str, skill_id: str, parts: Sequence[tuple[str, bytes]]
    ) -> SkillVersionRecord:
        """A new version of the skill (``NotFound`` for another workspace's)."""
        skill = await self._store.get_skill(workspace_id, skill_id)
        found = await self._bundle(parts)
        if found.name != skill.name:
            raise skill_name_changed(found.name, skill.name)  # the store checks it too
        staged = await self._stage(workspace_id, skill_id, found)
        _, version = await self._record(
            staged, lambda new: self._store.add_skill_version(skill_id, new), found
        )
        return version

    async def _bundle(self, parts: Sequence[tuple[str, bytes]]) -> skills.SkillBundle:
        # Inflating and zipping a few megabytes: off the event loop.
        return await anyio.to_thread.run_sync(skills.bundle, parts, self._limits)

    async def _stage(self, workspace_id: str, skill_id: str, found: skills.SkillBundle) -> NewFile:
        archive = await anyio.to_thread.run_sync(found.archive)

        async def chunks() -> AsyncIterator[bytes]:
            yield archive

        return await self._files.stage(
            workspace_id,
            f"{found.name}.zip",
            ZIP_TYPE,
            len(archive),
            chunks(),
            scope=FileScope(SKILL_SCOPE, skill_id),
        )

    async def _record(
        self,
        staged: NewFile,
        write: Callable[[NewSkillVersion], Awaitable[R]],
        found: skills.SkillBundle,
    ) -> R:
        self._failpoints.hit("skills.after_stage")
        new = NewSkillVersion(staged.workspace_id, found.name, found.description, staged.id)
        try:
            return await write(new)
        except NotFound as exc:
            if exc.kind == "file":  # the purger took the staged row: its blob is ours
                await self._files.abandon(staged)
            raise

    async def content(
        self, workspace_id: str, skill_id: str, version: str
    ) -> tuple[SkillVersionRecord, AsyncIterator[bytes]]:
        """A version (id or ``latest``) and its zip in chunks (``NotFound``, ``BlobError``)."""
        record = await self._store.get_skill_version(workspace_id, skill_id, version)
        return record, await self._files.blob(record.blob_key)

    async def delete(self, workspace_id: str, skill_id: str) -> None:
        """Deletes the skill with every version; gone for readers at commit,
        the blobs removed after (or by the purger if the blob store fails)."""
        await self._files.remove(await self._store.delete_skill(workspace_id, skill_id))

    async def delete_version(
        self, workspace_id: str, skill_id: str, version: str
    ) -> SkillVersionRecord:
        record, tombstone = await self._store.delete_skill_version(workspace_id, skill_id, version)
        await self._files.remove([tombstone])
        return record

    async def mount_files(self, session: SessionRecord) -> dict[str, list[MountFile]]:
        """What the session's sandbox shows under ``/workspace/skills``: skill
        name -> its files (paths inside the skill; executable as zipped), for
        each skill of the session's agent as it resolves now. A skill deleted
        since the agent named it is left out (the turn reports it)."""
        refs = session.agent.get("skills") or []
        resolved = await resolve_skills(self._store, session.workspace_id, refs)
        mounts: dict[str, list[MountFile]] = {}
        for version in resolved.versions:
            chunks = await self._files.blob(version.blob_key)
            archive = b"".join([chunk async for chunk in chunks])
            mounts[version.name] = await anyio.to_thread.run_sync(_unpack, version.name, archive)
        return mounts


def _unpack(name: str, archive: bytes) -> list[MountFile]:
    unpacked = skills.unpack(name, archive)
    return [MountFile(e.path, e.data, executable=e.executable) for e in unpacked]
