"""``MemoryKeeper`` on both store backends and a real blob directory: the
content-hash rule of ``write`` (a stale write is kept as a version and reported,
or refused and leaves nothing), concurrent writers, and the purger that removes
the blobs of refused, abandoned, redacted and deleted content."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from stead.blobs import BlobConfig, BlobStore, open_blob_store
from stead.ids import new_id
from stead.runtime import Embedder, MemoryKeeper
from stead.store import (
    PRECONDITION_FAILED,
    Actor,
    Conflict,
    NewVersion,
    PageRequest,
    SqlStore,
    VersionFilter,
)
from tests.databases import STORES

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
API = Actor("api_actor", "apikey_test")
AGENT = Actor("session_actor", "sesn_test")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class LaterClock:
    """The real time plus ``ahead``: makes a pending version look abandoned."""

    def __init__(self, ahead: timedelta) -> None:
        self.ahead = ahead

    def now(self) -> datetime:
        return datetime.now(UTC) + self.ahead

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return open_blob_store(BlobConfig(url=f"file://{tmp_path / 'blobs'}"))


@pytest.fixture
async def keeper(
    store: SqlStore, blobs: BlobStore, embedder: Embedder
) -> AsyncIterator[MemoryKeeper]:
    yield MemoryKeeper(store, lambda: blobs, embedder, purge_interval=60, upload_grace=60)


async def _new_memory(store: SqlStore, keeper: MemoryKeeper, content: str) -> tuple[str, str, str]:
    """(workspace id, store id, memory id) of a new memory holding ``content``."""
    workspace = await store.create_workspace("w")
    memory_store = await store.create_memory_store(workspace.id, "s", "", {})
    written = await keeper.create(workspace.id, memory_store.id, "/m.md", content, API)
    return workspace.id, memory_store.id, written.memory.id


async def _blob_count(blobs: BlobStore) -> int:
    return len(await blobs.list("memories"))


async def test_a_stale_write_back_keeps_both_contents(
    store: SqlStore, keeper: MemoryKeeper, blobs: BlobStore
) -> None:
    workspace, store_id, memory_id = await _new_memory(store, keeper, "base")
    first = await keeper.write(
        workspace,
        store_id,
        memory_id,
        content="mine",
        expected_sha256=sha("base"),
        actor=API,
        keep_stale=True,
    )
    assert not first.conflict and first.memory.content_sha256 == sha("mine")
    second = await keeper.write(
        workspace,
        store_id,
        memory_id,
        content="theirs",
        expected_sha256=sha("base"),
        actor=AGENT,
        keep_stale=True,
    )
    assert second.conflict
    assert second.memory.content_sha256 == sha("mine")  # the memory keeps the first write
    assert second.version.content_sha256 == sha("theirs") and second.version.id != (
        second.memory.version_id
    )
    current = await store.get_memory(workspace, store_id, memory_id)
    assert await keeper.content(current) == "mine"
    assert await keeper.content(second.version) == "theirs"
    assert second.version.created_by == AGENT
    assert await _blob_count(blobs) == 3


async def test_a_stale_api_write_is_refused_and_leaves_nothing(
    store: SqlStore, keeper: MemoryKeeper, blobs: BlobStore
) -> None:
    workspace, store_id, memory_id = await _new_memory(store, keeper, "base")
    await keeper.write(
        workspace,
        store_id,
        memory_id,
        content="new",
        expected_sha256=None,
        actor=API,
        keep_stale=False,
    )
    with pytest.raises(Conflict) as caught:
        await keeper.write(
            workspace,
            store_id,
            memory_id,
            content="late",
            expected_sha256=sha("base"),
            actor=API,
            keep_stale=False,
        )
    assert caught.value.code == PRECONDITION_FAILED
    assert await _blob_count(blobs) == 2
    assert await store.memory_blobs_to_purge(datetime.now(UTC), 10) == []


async def test_of_writers_racing_on_one_hash_one_wins_and_every_content_stays(
    store: SqlStore, keeper: MemoryKeeper
) -> None:
    workspace, store_id, memory_id = await _new_memory(store, keeper, "base")
    results = {}

    async def write(text: str) -> None:
        results[text] = await keeper.write(
            workspace,
            store_id,
            memory_id,
            content=text,
            expected_sha256=sha("base"),
            actor=AGENT,
            keep_stale=True,
        )

    async with anyio.create_task_group() as group:
        for text in ("a", "b", "c", "d"):
            group.start_soon(write, text)
    winners = [text for text, result in results.items() if not result.conflict]
    assert len(winners) == 1
    current = await store.get_memory(workspace, store_id, memory_id)
    assert current.content_sha256 == sha(winners[0])
    kept = {await keeper.content(result.version) for result in results.values()}
    assert kept == {"a", "b", "c", "d"}


async def test_a_refused_commit_removes_its_blob_at_once(
    store: SqlStore, keeper: MemoryKeeper, blobs: BlobStore
) -> None:
    workspace, store_id, _ = await _new_memory(store, keeper, "base")
    with pytest.raises(Conflict):
        await keeper.create(workspace, store_id, "/m.md", "same path", API)
    assert await _blob_count(blobs) == 1


async def test_the_purger_removes_abandoned_redacted_and_deleted_content(
    store: SqlStore, blobs: BlobStore, embedder: Embedder
) -> None:
    keeper = MemoryKeeper(store, lambda: blobs, embedder, purge_interval=60, upload_grace=60)
    workspace, store_id, memory_id = await _new_memory(store, keeper, "one")
    written = await keeper.write(
        workspace,
        store_id,
        memory_id,
        content="two",
        expected_sha256=None,
        actor=API,
        keep_stale=False,
    )
    # A writer that died between beginning its version and committing it.
    version_id = new_id("memory_version")
    key = f"memories/{workspace}/{store_id}/{version_id}"
    new = NewVersion(version_id, workspace, store_id, memory_id, None, sha("x"), 1, key, API, b"")
    await store.begin_memory_version(new)
    await blobs.put_bytes(key, b"x")
    assert await keeper.purge() == 0  # within the grace it may still commit
    later = MemoryKeeper(
        store,
        lambda: blobs,
        embedder,
        purge_interval=60,
        upload_grace=60,
        clock=LaterClock(timedelta(hours=1)),
    )
    assert await later.purge() == 1
    assert await blobs.head(key) is None

    first_version = (await store.get_memory(workspace, store_id, memory_id)).version_id
    assert first_version == written.version.id
    listed = await store.list_memory_versions(
        workspace,
        store_id,
        VersionFilter(),
        PageRequest(limit=10, order="desc"),
    )
    oldest = listed.items[-1]
    await keeper.redact(workspace, store_id, oldest.id, API)
    assert await _blob_count(blobs) == 1
    await store.delete_memory_store(workspace, store_id)
    assert await keeper.purge() == 1
    assert await _blob_count(blobs) == 0
    assert await store.memory_blobs_to_purge(datetime.now(UTC) + timedelta(days=1), 10) == []


async def test_of_creates_racing_for_one_path_one_wins_and_the_rest_conflict(
    store: SqlStore,
) -> None:
    workspace = await store.create_workspace("w")
    memory_store = await store.create_memory_store(workspace.id, "s", "", {})
    staged = []
    for _ in range(8):  # every version begun first, so the commits overlap
        version_id = new_id("memory_version")
        staged.append(version_id)
        await store.begin_memory_version(
            NewVersion(
                version_id,
                workspace.id,
                memory_store.id,
                new_id("memory"),
                "/same.md",
                sha(""),
                0,
                f"memories/{version_id}",
                API,
                b"",
            )
        )
    outcomes: list[str] = []

    async def commit(version_id: str) -> None:
        try:
            await store.commit_memory_create(workspace.id, version_id)
            outcomes.append("made")
        except Conflict as exc:
            outcomes.append(str(exc.code))

    async with anyio.create_task_group() as group:
        for version_id in staged:
            group.start_soon(commit, version_id)
    assert sorted(outcomes) == ["made"] + ["memory_path_conflict_error"] * 7


async def test_search_finds_current_content_by_meaning(
    store: SqlStore, keeper: MemoryKeeper
) -> None:
    workspace = await store.create_workspace("w")
    memory_store = await store.create_memory_store(workspace.id, "s", "", {})
    texts = {
        "/pets/cat.md": "The cat sleeps on the warm windowsill every afternoon.",
        "/work/deploy.md": "Deploy the API with blue-green releases behind the load balancer.",
        "/food/bread.md": "Knead the sourdough, let it rise overnight, bake at 230 degrees.",
    }
    made = {
        path: await keeper.create(workspace.id, memory_store.id, path, text, API)
        for path, text in texts.items()
    }
    hits = await keeper.search(workspace.id, memory_store.id, "how do we ship a new release", 3)
    assert hits[0].path == "/work/deploy.md"
    assert hits[0].score > hits[1].score >= hits[2].score
    assert hits[0].version_id == made["/work/deploy.md"].memory.version_id
    kitten = await keeper.search(workspace.id, memory_store.id, "a kitten napping", 1)
    assert [h.path for h in kitten] == ["/pets/cat.md"]
    only_food = await keeper.search(workspace.id, memory_store.id, "a kitten", 5, "/food/")
    assert [h.path for h in only_food] == ["/food/bread.md"]

    changed = await keeper.write(
        workspace.id,
        memory_store.id,
        made["/pets/cat.md"].memory.id,
        content="Release checklist: tag, build, deploy to production.",
        expected_sha256=None,
        actor=API,
        keep_stale=False,
    )
    again = await keeper.search(workspace.id, memory_store.id, "a kitten napping", 3)
    cat = next(h for h in again if h.path == "/pets/cat.md")
    assert cat.version_id == changed.version.id and cat.score < kitten[0].score
