"""Skills and their immutable versions in memory (``_skills.py``'s rules: a
version's id and the refusals are its functions). A version's zip is a file of
scope ``skill``, made ready in the write that records it and tombstoned in the
one that deletes it."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from stead.store._skills import LATEST, version_id
from stead.store.errors import NotFound
from stead.store.files import FileRecord
from stead.store.inmemory import files
from stead.store.inmemory.tables import SkillVersionRow, Tables, page_of
from stead.store.paging import Page, PageRequest
from stead.store.skills import (
    NewSkillVersion,
    SkillRecord,
    SkillVersionRecord,
    only_version,
    skill_name_changed,
    skill_name_taken,
)


def _record(t: Tables, row: SkillVersionRow) -> SkillVersionRecord | None:
    """The version with its zip's key and size; None once the zip's row is gone
    (the SQL store reads versions joined to their files)."""
    zipped = t.files.get(row.file_id)
    if zipped is None:
        return None
    return SkillVersionRecord(
        skill_id=row.skill_id,
        version=row.version,
        workspace_id=row.workspace_id,
        name=row.name,
        description=row.description,
        file_id=row.file_id,
        blob_key=zipped.blob_key,
        size_bytes=zipped.size_bytes,
        created_at=row.created_at,
    )


def _insert_version(
    t: Tables, now: datetime, skill_id: str, version: str, new: NewSkillVersion
) -> None:
    files.mark_ready(t, now, new.workspace_id, new.file_id)
    t.skill_versions[(skill_id, version)] = SkillVersionRow(
        skill_id, version, new.workspace_id, new.name, new.description, new.file_id, now
    )


def skill_named(t: Tables, workspace_id: str, name: str) -> SkillRecord | None:
    return next(
        (s for s in t.skills.values() if s.workspace_id == workspace_id and s.name == name), None
    )


def create_skill(
    t: Tables, now: datetime, skill_id: str, display_name: str, first: NewSkillVersion
) -> tuple[SkillRecord, SkillVersionRecord]:
    if skill_named(t, first.workspace_id, first.name) is not None:
        raise skill_name_taken(first.name)
    version = version_id(now, None)
    t.skills[skill_id] = SkillRecord(
        skill_id, first.workspace_id, first.name, display_name, version, now, now
    )
    _insert_version(t, now, skill_id, version, first)
    return t.skills[skill_id], get_skill_version(t, first.workspace_id, skill_id, version)


def add_skill_version(
    t: Tables, now: datetime, skill_id: str, new: NewSkillVersion
) -> tuple[SkillRecord, SkillVersionRecord]:
    skill = get_skill(t, new.workspace_id, skill_id)
    if new.name != skill.name:
        raise skill_name_changed(new.name, skill.name)
    version = version_id(now, skill.latest_version)
    _insert_version(t, now, skill_id, version, new)
    t.skills[skill_id] = replace(skill, latest_version=version, updated_at=now)
    return t.skills[skill_id], get_skill_version(t, new.workspace_id, skill_id, version)


def get_skill(t: Tables, workspace_id: str, skill_id: str) -> SkillRecord:
    found = t.skills.get(skill_id)
    if found is None or found.workspace_id != workspace_id:
        raise NotFound("skill", skill_id)
    return found


def list_skills(t: Tables, workspace_id: str, page: PageRequest) -> Page[SkillRecord]:
    rows = [s for s in t.skills.values() if s.workspace_id == workspace_id]
    return page_of(rows, lambda s: (s.created_at, s.id), page)


def get_skill_version(
    t: Tables, workspace_id: str, skill_id: str, version: str
) -> SkillVersionRecord:
    if version == LATEST:
        version = get_skill(t, workspace_id, skill_id).latest_version
    row = t.skill_versions.get((skill_id, version))
    found = None if row is None or row.workspace_id != workspace_id else _record(t, row)
    if found is None:
        raise NotFound("skill version", version)
    return found


def _versions(t: Tables, skill_id: str) -> list[SkillVersionRecord]:
    found = (_record(t, row) for (s, _), row in t.skill_versions.items() if s == skill_id)
    return [v for v in found if v is not None]


def list_skill_versions(
    t: Tables, workspace_id: str, skill_id: str, page: PageRequest
) -> Page[SkillVersionRecord]:
    get_skill(t, workspace_id, skill_id)
    return page_of(_versions(t, skill_id), lambda v: (v.created_at, v.version), page)


def delete_skill(t: Tables, now: datetime, workspace_id: str, skill_id: str) -> list[FileRecord]:
    get_skill(t, workspace_id, skill_id)
    held = [key for key in t.skill_versions if key[0] == skill_id]
    gone = files.tombstone(t, now, [t.skill_versions[key].file_id for key in held])
    for key in held:
        del t.skill_versions[key]
    del t.skills[skill_id]
    return gone


def delete_skill_version(
    t: Tables, now: datetime, workspace_id: str, skill_id: str, version: str
) -> tuple[SkillVersionRecord, FileRecord]:
    found = get_skill_version(t, workspace_id, skill_id, version)
    others = [
        row for (s, v), row in t.skill_versions.items() if s == skill_id and v != found.version
    ]
    if not others:
        raise only_version(found.version)
    newest = max(others, key=lambda row: (row.created_at, row.version))
    del t.skill_versions[(skill_id, found.version)]
    skill = t.skills[skill_id]
    t.skills[skill_id] = replace(skill, latest_version=newest.version, updated_at=now)
    (tombstoned,) = files.tombstone(t, now, [found.file_id])
    return found, tombstoned
