"""Skills on every store: a name once per workspace and for good, versions that
make their staged zip ready (and hidden from the Files API), ``latest``, and a
skill that keeps at least one version."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from stead.ids import new_id
from stead.store import (
    SKILL_SCOPE,
    Conflict,
    FileScope,
    NewFile,
    NewSkillVersion,
    NotFound,
    PageRequest,
    SqlStore,
)
from tests.databases import STORES

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
PAGE = PageRequest(limit=10, order="asc")


async def _staged(store: SqlStore, workspace: str, skill_id: str, name: str) -> NewSkillVersion:
    file_id = new_id("file")
    scope = FileScope(SKILL_SCOPE, skill_id)
    new = NewFile(
        file_id, workspace, f"{name}.zip", "application/zip", 3, f"k/{file_id}", None, scope
    )
    await store.begin_file(new)
    return NewSkillVersion(workspace, name, f"{name} does things", file_id)


async def test_a_skills_name_is_its_own_and_its_versions_follow_latest(store: SqlStore) -> None:
    workspace = (await store.create_workspace("w")).id
    skill_id = new_id("skill")
    skill, first = await store.create_skill(
        skill_id, "Alpha", await _staged(store, workspace, skill_id, "alpha")
    )
    assert (skill.name, skill.latest_version, first.size_bytes) == ("alpha", first.version, 3)
    assert (await store.list_files(workspace, PAGE, None)).items == []  # the Skills API's
    other = new_id("skill")
    with pytest.raises(Conflict) as taken:
        await store.create_skill(other, "A", await _staged(store, workspace, other, "alpha"))
    assert taken.value.code == "skill_name_taken"
    with pytest.raises(Conflict, match="never changes"):
        await store.add_skill_version(skill_id, await _staged(store, workspace, skill_id, "beta"))
    skill, second = await store.add_skill_version(
        skill_id, await _staged(store, workspace, skill_id, "alpha")
    )
    assert int(second.version) > int(first.version) and skill.latest_version == second.version
    assert await store.get_skill_version(workspace, skill_id, "latest") == second
    listed = await store.list_skill_versions(workspace, skill_id, PAGE)
    assert [v.version for v in listed.items] == [first.version, second.version]
    assert await store.skill_named(workspace, "alpha") == skill
    removed, tombstone = await store.delete_skill_version(workspace, skill_id, "latest")
    assert removed == second and tombstone.id == second.file_id and tombstone.deleted_at
    assert (await store.get_skill(workspace, skill_id)).latest_version == first.version
    with pytest.raises(Conflict, match="only version"):
        await store.delete_skill_version(workspace, skill_id, first.version)
    elsewhere = (await store.create_workspace("o")).id
    with pytest.raises(NotFound):
        await store.get_skill(elsewhere, skill_id)
    [gone] = await store.delete_skill(workspace, skill_id)
    assert gone.id == first.file_id and gone.deleted_at is not None
    assert await store.skill_named(workspace, "alpha") is None


async def test_a_purged_staging_is_not_recorded(store: SqlStore) -> None:
    workspace = (await store.create_workspace("w")).id
    skill_id = new_id("skill")
    staged = await _staged(store, workspace, skill_id, "alpha")
    [purged] = await store.files_to_purge(datetime.now(UTC) + timedelta(hours=1), 10)
    assert purged.id == staged.file_id
    with pytest.raises(NotFound):
        await store.create_skill(skill_id, "Alpha", staged)
    assert await store.skill_named(workspace, "alpha") is None
    assert (await store.list_skills(workspace, PAGE)).items == []
