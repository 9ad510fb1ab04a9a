"""The skill aggregate: skills and their immutable versions, and the narrow protocol for them.

A skill is a named bundle of files with a ``SKILL.md``; each upload is a new
version. A version's bytes (one zip of ``<name>/...``) are a row of the files
table with scope ``{type: "skill"}``, so they share the Files API's blob
lifecycle (pending -> ready -> tombstone -> purged) while staying out of its
listings. A skill always holds at least one version.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from stead.store.errors import Conflict

if TYPE_CHECKING:  # base.py builds Store on SkillStore, so only types come from it
    from stead.store.files import FileRecord
    from stead.store.paging import Page, PageRequest

SKILL_SCOPE = "skill"
"""``files.scope_type`` of a skill version's bytes: hidden from the Files API."""


def skill_name_taken(name: str) -> Conflict:
    return Conflict(
        f"files: this workspace already has a skill named {name!r}; "
        "add a version to it, or rename the skill in SKILL.md",
        code="skill_name_taken",
        details={"skill_name": name},
    )


def skill_name_changed(new: str, current: str) -> Conflict:
    return Conflict(
        f"files: SKILL.md names the skill {new!r}, but this skill is {current!r} "
        "(a skill's name never changes)",
        status=400,
    )


def only_version(version: str) -> Conflict:
    return Conflict(
        f"version: {version} is the skill's only version; a skill keeps "
        "at least one, so delete the skill instead",
        status=400,
    )


@dataclass(frozen=True, slots=True)
class NewSkillVersion:
    """A version whose zip is staged as the pending file ``file_id``."""

    workspace_id: str
    name: str
    description: str
    file_id: str


@dataclass(frozen=True, slots=True)
class SkillRecord:
    id: str
    workspace_id: str
    name: str
    display_name: str
    latest_version: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class SkillVersionRecord:
    skill_id: str
    version: str
    """The version's id: microseconds since the epoch when it was made, as
    digits (increasing within a skill)."""
    workspace_id: str
    name: str
    description: str
    file_id: str
    blob_key: str
    size_bytes: int
    created_at: datetime

    @property
    def id(self) -> str:
        return self.version


class SkillStore(Protocol):
    async def create_skill(
        self, skill_id: str, display_name: str, first: NewSkillVersion
    ) -> tuple[SkillRecord, SkillVersionRecord]:
        """Makes the staged file ready and records the skill with its first
        version, in one transaction. ``Conflict`` (``skill_name_taken``) if the
        workspace has a skill of that name; ``NotFound`` if the staged file was
        purged meanwhile. On either, the staged file stays pending (the purger's)."""
        ...

    async def add_skill_version(
        self, skill_id: str, new: NewSkillVersion
    ) -> tuple[SkillRecord, SkillVersionRecord]:
        """Makes the staged file ready and records it as the skill's newest
        version. ``NotFound`` if the skill is not the workspace's;
        ``Conflict`` (400) if ``new.name`` is not the skill's name."""
        ...

    async def get_skill(self, workspace_id: str, skill_id: str) -> SkillRecord:
        """``NotFound`` for unknown skills and other workspaces' alike."""
        ...

    async def skill_named(self, workspace_id: str, name: str) -> SkillRecord | None: ...

    async def list_skills(self, workspace_id: str, page: PageRequest) -> Page[SkillRecord]:
        """By (created_at, id) in ``page.order``."""
        ...

    async def get_skill_version(
        self, workspace_id: str, skill_id: str, version: str
    ) -> SkillVersionRecord:
        """``version`` is a version id or ``latest``; ``NotFound`` otherwise."""
        ...

    async def list_skill_versions(
        self, workspace_id: str, skill_id: str, page: PageRequest
    ) -> Page[SkillVersionRecord]:
        """By (created_at, version) in ``page.order``; ``NotFound`` for no such skill."""
        ...

    async def delete_skill(self, workspace_id: str, skill_id: str) -> list[FileRecord]:
        """Removes the skill and its versions and tombstones their files, in one
        transaction; returns the tombstones, whose blobs the caller removes."""
        ...

    async def delete_skill_version(
        self, workspace_id: str, skill_id: str, version: str
    ) -> tuple[SkillVersionRecord, FileRecord]:
        """Removes one version (``latest`` allowed) and tombstones its file.
        ``Conflict`` (400) for a skill's only version: delete the skill instead."""
        ...
