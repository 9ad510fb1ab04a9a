"""Skills (see ``skills.py``): one row per skill, one per immutable version; a
version's zip is a files row, made ready in the transaction that records it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select, update

from stead.store import _files, _locks
from stead.store._paging import fetch_page
from stead.store.base import Page, PageRequest
from stead.store.errors import NotFound
from stead.store.files import FileRecord
from stead.store.skills import (
    NewSkillVersion,
    SkillRecord,
    SkillVersionRecord,
    only_version,
    skill_name_changed,
    skill_name_taken,
)
from stead.store.tables import files, skill_versions, skills, workspaces

LATEST = "latest"
_VERSION_COLUMNS = (*skill_versions.c, files.c.blob_key, files.c.size_bytes)


def _skill(row: Row[Any]) -> SkillRecord:
    return SkillRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        name=row.name,
        display_name=row.display_name,
        latest_version=row.latest_version,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _version(row: Row[Any]) -> SkillVersionRecord:
    return SkillVersionRecord(
        skill_id=row.skill_id,
        version=row.version,
        workspace_id=row.workspace_id,
        name=row.name,
        description=row.description,
        file_id=row.file_id,
        blob_key=row.blob_key,
        size_bytes=row.size_bytes,
        created_at=row.created_at,
    )


def version_id(now: datetime, after: str | None) -> str:
    """Microseconds since the epoch, past ``after`` so ids increase within a skill."""
    micros = int(now.timestamp() * 1_000_000)
    return str(micros if after is None else max(micros, int(after) + 1))


def _insert_version(
    conn: Connection, now: datetime, skill_id: str, version: str, new: NewSkillVersion
) -> None:
    _files.mark_ready(conn, now, new.workspace_id, new.file_id)
    conn.execute(
        insert(skill_versions).values(
            skill_id=skill_id,
            version=version,
            workspace_id=new.workspace_id,
            name=new.name,
            description=new.description,
            file_id=new.file_id,
            created_at=now,
        )
    )


def skill_named(conn: Connection, workspace_id: str, name: str) -> SkillRecord | None:
    row = conn.execute(
        select(skills).where(skills.c.workspace_id == workspace_id, skills.c.name == name)
    ).first()
    return None if row is None else _skill(row)


def create_skill(
    conn: Connection, now: datetime, skill_id: str, display_name: str, first: NewSkillVersion
) -> tuple[SkillRecord, SkillVersionRecord]:
    # PostgreSQL: two creates of one name in a workspace queue on its row.
    _locks.row(conn, workspaces, first.workspace_id)
    if skill_named(conn, first.workspace_id, first.name) is not None:
        raise skill_name_taken(first.name)
    version = version_id(now, None)
    conn.execute(
        insert(skills).values(
            id=skill_id,
            workspace_id=first.workspace_id,
            name=first.name,
            display_name=display_name,
            latest_version=version,
            created_at=now,
            updated_at=now,
        )
    )
    _insert_version(conn, now, skill_id, version, first)
    return get_skill(conn, first.workspace_id, skill_id), get_skill_version(
        conn, first.workspace_id, skill_id, version
    )


def add_skill_version(
    conn: Connection, now: datetime, skill_id: str, new: NewSkillVersion
) -> tuple[SkillRecord, SkillVersionRecord]:
    _locks.row(conn, skills, skill_id)
    skill = get_skill(conn, new.workspace_id, skill_id)
    if new.name != skill.name:
        raise skill_name_changed(new.name, skill.name)
    version = version_id(now, skill.latest_version)
    _insert_version(conn, now, skill_id, version, new)
    conn.execute(
        update(skills).where(skills.c.id == skill_id).values(latest_version=version, updated_at=now)
    )
    return get_skill(conn, new.workspace_id, skill_id), get_skill_version(
        conn, new.workspace_id, skill_id, version
    )


def get_skill(conn: Connection, workspace_id: str, skill_id: str) -> SkillRecord:
    row = conn.execute(
        select(skills).where(skills.c.id == skill_id, skills.c.workspace_id == workspace_id)
    ).first()
    if row is None:
        raise NotFound("skill", skill_id)
    return _skill(row)


def list_skills(conn: Connection, workspace_id: str, page: PageRequest) -> Page[SkillRecord]:
    stmt = select(skills).where(skills.c.workspace_id == workspace_id)
    return fetch_page(conn, stmt, [skills.c.created_at, skills.c.id], page, _skill)


def _versions() -> Any:
    return select(*_VERSION_COLUMNS).join(files, files.c.id == skill_versions.c.file_id)


def get_skill_version(
    conn: Connection, workspace_id: str, skill_id: str, version: str
) -> SkillVersionRecord:
    if version == LATEST:
        version = get_skill(conn, workspace_id, skill_id).latest_version
    row = conn.execute(
        _versions().where(
            skill_versions.c.skill_id == skill_id,
            skill_versions.c.version == version,
            skill_versions.c.workspace_id == workspace_id,
        )
    ).first()
    if row is None:
        raise NotFound("skill version", version)
    return _version(row)


def list_skill_versions(
    conn: Connection, workspace_id: str, skill_id: str, page: PageRequest
) -> Page[SkillVersionRecord]:
    get_skill(conn, workspace_id, skill_id)
    stmt = _versions().where(skill_versions.c.skill_id == skill_id)
    key = [skill_versions.c.created_at, skill_versions.c.version]
    return fetch_page(conn, stmt, key, page, _version)


def delete_skill(
    conn: Connection, now: datetime, workspace_id: str, skill_id: str
) -> list[FileRecord]:
    _locks.row(conn, skills, skill_id)
    get_skill(conn, workspace_id, skill_id)
    file_ids = conn.execute(
        select(skill_versions.c.file_id).where(skill_versions.c.skill_id == skill_id)
    ).scalars()
    gone = _files.tombstone(conn, now, list(file_ids))
    conn.execute(delete(skill_versions).where(skill_versions.c.skill_id == skill_id))
    conn.execute(delete(skills).where(skills.c.id == skill_id))
    return gone


def delete_skill_version(
    conn: Connection, now: datetime, workspace_id: str, skill_id: str, version: str
) -> tuple[SkillVersionRecord, FileRecord]:
    _locks.row(conn, skills, skill_id)
    found = get_skill_version(conn, workspace_id, skill_id, version)
    newest = conn.execute(
        select(skill_versions.c.version)
        .where(skill_versions.c.skill_id == skill_id, skill_versions.c.version != found.version)
        .order_by(skill_versions.c.created_at.desc(), skill_versions.c.version.desc())
        .limit(1)
    ).scalar()
    if newest is None:
        raise only_version(found.version)
    conn.execute(
        delete(skill_versions).where(
            skill_versions.c.skill_id == skill_id, skill_versions.c.version == found.version
        )
    )
    conn.execute(
        update(skills).where(skills.c.id == skill_id).values(latest_version=newest, updated_at=now)
    )
    (tombstoned,) = _files.tombstone(conn, now, [found.file_id])
    return found, tombstoned
