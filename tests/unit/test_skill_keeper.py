"""``SkillKeeper`` on each store with a real blob directory: what a session's
sandbox mounts under /workspace/skills (``mount_files``), and the blobs of
versions that are deleted, or staged and never recorded, going away."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stead.blobs import BlobConfig
from stead.ids import new_id
from stead.runtime import FileKeeper, SkillKeeper, resolve_skills
from stead.sandbox import MountFile
from stead.schemas import SkillLimits
from stead.store import Conflict, NewSkillVersion, SessionRecord, SqlStore
from tests.databases import STORES
from tests.integration.skill_files import zipped
from tests.unit.conftest import ManualClock, definition

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]

LIMITS = SkillLimits(max_total_bytes=1_000_000, max_file_bytes=100_000, max_files=50)


def _md(name: str, description: str = "Does things.") -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\n# {name}\n".encode()


def _files(name: str, script: bytes) -> list[tuple[str, bytes]]:
    return [(f"{name}/SKILL.md", _md(name)), (f"{name}/bin/run.sh", script)]


def _blobs(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def files(store: SqlStore, tmp_path: Path, clock: ManualClock) -> FileKeeper:
    blobs = BlobConfig(url=f"file://{tmp_path / 'blobs'}")
    return FileKeeper(store, blobs, purge_interval=60, upload_grace=60, clock=clock)


@pytest.fixture
def keeper(store: SqlStore, files: FileKeeper) -> SkillKeeper:
    return SkillKeeper(store, files, LIMITS)


async def _session(store: SqlStore, workspace_id: str, skills: list[Any]) -> SessionRecord:
    agent = await store.create_agent(workspace_id, definition())
    env = await store.create_environment(
        workspace_id, new_id("environment"), None, {"type": "cloud"}, {}, None
    )
    session, _ = await store.create_session(
        workspace_id, (agent.id, None), lambda a: {"id": a.id, "skills": skills}, env.id, {}, []
    )
    return session


async def test_mount_files_are_each_skill_at_the_version_its_agent_names(
    store: SqlStore, keeper: SkillKeeper
) -> None:
    workspace = (await store.create_workspace("w")).id
    alpha, _ = await keeper.create(workspace, new_id("skill"), _files("alpha", b"a1"), None)
    beta, beta_first = await keeper.create(workspace, new_id("skill"), _files("beta", b"b1"), None)
    zipped_executable = zipped(_files("alpha", b"a2"), modes={"alpha/bin/run.sh": 0o755})
    await keeper.add_version(workspace, alpha.id, [("alpha.zip", zipped_executable)])
    await keeper.add_version(workspace, beta.id, _files("beta", b"b2"))
    session = await _session(
        store,
        workspace,
        [
            {"type": "custom", "skill_id": alpha.id, "version": "latest"},
            {"type": "custom", "skill_id": beta.id, "version": beta_first.version},
        ],
    )
    assert await keeper.mount_files(session) == {
        "alpha": [MountFile("SKILL.md", _md("alpha")), MountFile("bin/run.sh", b"a2", True)],
        "beta": [MountFile("SKILL.md", _md("beta")), MountFile("bin/run.sh", b"b1")],
    }

    await keeper.delete(workspace, beta.id)
    assert set(await keeper.mount_files(session)) == {"alpha"}
    resolved = await resolve_skills(store, workspace, session.agent["skills"])
    assert [v.name for v in resolved.versions] == ["alpha"]
    assert resolved.missing == [f"skill {beta.id} version {beta_first.version} no longer exists"]
    assert await keeper.mount_files(await _session(store, workspace, [])) == {}


async def test_deleting_removes_the_blobs_of_every_version(
    store: SqlStore, keeper: SkillKeeper, tmp_path: Path
) -> None:
    workspace = (await store.create_workspace("w")).id
    skill, first = await keeper.create(workspace, new_id("skill"), _files("gamma", b"1"), None)
    second = await keeper.add_version(workspace, skill.id, _files("gamma", b"2"))
    assert len(_blobs(tmp_path / "blobs")) == 2
    await keeper.delete_version(workspace, skill.id, second.version)
    assert len(_blobs(tmp_path / "blobs")) == 1
    assert (await store.get_skill(workspace, skill.id)).latest_version == first.version
    await keeper.delete(workspace, skill.id)
    assert _blobs(tmp_path / "blobs") == set()
    assert not await store.files_to_purge(datetime.now(UTC), 10)


async def test_a_version_staged_but_never_recorded_is_purged_after_the_grace(
    store: SqlStore, files: FileKeeper, keeper: SkillKeeper, clock: ManualClock, tmp_path: Path
) -> None:
    workspace = (await store.create_workspace("w")).id
    await keeper.create(workspace, new_id("skill"), _files("delta", b"1"), None)
    # A second create of the same name that passed the early check (another
    # request won the race) stages its zip, then the store refuses it.
    staged = await files.stage(workspace, "delta.zip", "application/zip", 3, _chunks(b"zip"))
    with pytest.raises(Conflict, match="delta"):
        await store.create_skill(
            new_id("skill"), "delta", NewSkillVersion(workspace, "delta", "D.", staged.id)
        )
    assert len(_blobs(tmp_path / "blobs")) == 2
    assert await files.purge() == 0  # within the grace: the upload may still finish
    clock.at += timedelta(seconds=61)
    assert await files.purge() == 1
    assert len(_blobs(tmp_path / "blobs")) == 1


async def _chunks(data: bytes) -> Any:
    yield data
