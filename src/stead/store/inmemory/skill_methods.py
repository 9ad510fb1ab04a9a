"""``SkillStore`` on the in-memory store: each method one write or read of ``skills.py``."""

from __future__ import annotations

from stead.store.files import FileRecord
from stead.store.inmemory import skills
from stead.store.inmemory.transactions import Transactions
from stead.store.paging import Page, PageRequest
from stead.store.skills import NewSkillVersion, SkillRecord, SkillVersionRecord


class SkillMethods(Transactions):
    async def create_skill(
        self, skill_id: str, display_name: str, first: NewSkillVersion
    ) -> tuple[SkillRecord, SkillVersionRecord]:
        return await self._write(skills.create_skill, skill_id, display_name, first)

    async def add_skill_version(
        self, skill_id: str, new: NewSkillVersion
    ) -> tuple[SkillRecord, SkillVersionRecord]:
        return await self._write(skills.add_skill_version, skill_id, new)

    async def get_skill(self, workspace_id: str, skill_id: str) -> SkillRecord:
        return await self._read(skills.get_skill, workspace_id, skill_id)

    async def skill_named(self, workspace_id: str, name: str) -> SkillRecord | None:
        return await self._read(skills.skill_named, workspace_id, name)

    async def list_skills(self, workspace_id: str, page: PageRequest) -> Page[SkillRecord]:
        return await self._read(skills.list_skills, workspace_id, page)

    async def get_skill_version(
        self, workspace_id: str, skill_id: str, version: str
    ) -> SkillVersionRecord:
        return await self._read(skills.get_skill_version, workspace_id, skill_id, version)

    async def list_skill_versions(
        self, workspace_id: str, skill_id: str, page: PageRequest
    ) -> Page[SkillVersionRecord]:
        return await self._read(skills.list_skill_versions, workspace_id, skill_id, page)

    async def delete_skill(self, workspace_id: str, skill_id: str) -> list[FileRecord]:
        return await self._write(skills.delete_skill, workspace_id, skill_id)

    async def delete_skill_version(
        self, workspace_id: str, skill_id: str, version: str
    ) -> tuple[SkillVersionRecord, FileRecord]:
        return await self._write(skills.delete_skill_version, workspace_id, skill_id, version)
