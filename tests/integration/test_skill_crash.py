"""SIGKILL of ``stead serve`` while a skill is created, after its zip is in the
blob store and before the skill is recorded: after a restart there is no
skill, the name is free, and the purger removes the orphaned zip."""

from __future__ import annotations

import time
from pathlib import Path

import anthropic
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess
from tests.conftest import loop_env, make_client
from tests.integration.skill_files import skill_files

WAIT = 30.0


def _blobs(data: Path) -> set[Path]:
    root = data / "blobs" / "files"
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_a_create_killed_after_staging_leaves_nothing_behind(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    data = tmp_path / "data"
    fast_purge = {
        "STEAD_FILE_UPLOAD_GRACE_SECONDS": "0.5",
        "STEAD_FILE_PURGE_INTERVAL_SECONDS": "0.2",
    }
    doomed = ServerProcess(
        data, env=loop_env(fake_model, STEAD_FAILPOINTS="skills.after_stage:1"), forker=forker
    ).start()
    key = doomed.first_key
    assert key
    try:
        with make_client(doomed.url, key) as client, pytest.raises(anthropic.APIConnectionError):
            client.beta.skills.create(files=skill_files("crash-skill"))
        assert len(_blobs(data)) == 1, "the zip was written before the kill"
    finally:
        doomed.kill()

    survivor = ServerProcess(data, env=loop_env(fake_model, **fast_purge), forker=forker).start()
    try:
        with make_client(survivor.url, key) as client:
            assert list(client.beta.skills.list()) == []
            deadline = time.monotonic() + WAIT
            while _blobs(data) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _blobs(data) == set(), "the purger removes the orphaned zip"
            skill = client.beta.skills.create(files=skill_files("crash-skill"))
            assert [s.id for s in client.beta.skills.list()] == [skill.id]
            assert len(_blobs(data)) == 1
    finally:
        survivor.stop()
