"""The write-back of memory mounts (``runtime.memory_mounts``): which files the
agent changed against their bases, what staging puts, records and removes, and
the ``MountClaim`` that commits each change once, on both store backends (the
second try of a write-back cut short by a crash finds its base moved and keeps
nothing, even for a stale write whose content differs from the memory's)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from stead.blobs import BlobConfig, BlobStore, open_blob_store
from stead.mount_paths import NAME_MAX
from stead.runtime import Embedder, MemoryKeeper
from stead.runtime.memory_diff import Change, changes, stage_plan
from stead.sandbox import MountedFile
from stead.schemas.resources import memory_mount_paths
from stead.store import (
    MOUNT_MOVED,
    Actor,
    Conflict,
    MemoryRecord,
    MountBase,
    MountClaim,
    NotFound,
    PageRequest,
    SessionFilter,
    SqlStore,
    VersionFilter,
)
from tests.databases import STORES
from tests.unit.conftest import definition

API = Actor("api_actor", "apikey_test")
SESSION = "sesn_mounted"
AGENT = Actor("session_actor", SESSION)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def held(**files: str) -> list[MountedFile]:
    return [MountedFile(path, len(text), sha(text)) for path, text in files.items()]


def base(path: str, text: str, memory_id: str = "mem_1") -> MountBase:
    return MountBase("memstore_1", path, memory_id, sha(text))


def memory(path: str, text: str, memory_id: str = "mem_1") -> MemoryRecord:
    return MemoryRecord(memory_id, "memstore_1", path, sha(text), len(text), "v", "k", NOW, NOW)


def test_changes_are_files_that_differ_from_their_base() -> None:
    writing = ".stead-put-0123456789abcdef"  # the host's while it puts a file: not the agent's
    found = changes(
        held(
            **{
                "same.md": "s",
                "edited.md": "new",
                "made.md": "m",
                writing: "x",
                ".stead-put-x": "y",
            }
        ),
        [base("/same.md", "s"), base("/edited.md", "old"), base("/gone.md", "g")],
    )
    assert found == [
        Change("created", "/.stead-put-x", None, sha("y")),  # named like it, but a memory
        Change("modified", "/edited.md", base("/edited.md", "old"), sha("new")),
        Change("deleted", "/gone.md", base("/gone.md", "g"), None),
        Change("created", "/made.md", None, sha("m")),
    ]


def test_a_listing_cut_short_deletes_nothing() -> None:
    """A mount with more entries than one listing visits lists some files: one
    it did not list is not a deletion, and nothing is put over it."""
    bases = [base("/listed.md", "old"), base("/unlisted.md", "u", "mem_2")]
    found = changes(held(**{"listed.md": "new", "made.md": "m"}), bases, whole=False)
    assert found == [
        Change("modified", "/listed.md", bases[0], sha("new")),
        Change("created", "/made.md", None, sha("m")),
    ]
    current = [memory("/unlisted.md", "api v2", "mem_2"), memory("/fresh.md", "api", "mem_3")]
    plan = stage_plan(current, held(), [bases[1]], writable=True, whole=False)
    assert (plan.put, plan.remove, plan.drop) == ([], [], [])
    # A read-only mount holds nothing of the agent's: the API's content goes in.
    strict = stage_plan(current, held(), [bases[1]], writable=False, whole=False)
    assert [m.path for m in strict.put] == ["/unlisted.md", "/fresh.md"]


def test_staging_puts_the_api_content_but_never_over_an_agents_change() -> None:
    current = [
        memory("/fresh.md", "api", "mem_a"),  # no file yet
        memory("/moved.md", "api v2", "mem_b"),  # file unchanged since staged: refreshed
        memory("/mine.md", "api v2", "mem_c"),  # the agent changed it: left alone
        memory("/equal.md", "same", "mem_d"),  # the file holds it already: base recorded
    ]
    files = held(
        **{
            "moved.md": "api v1",
            "mine.md": "agent",
            "equal.md": "same",
            "deleted.md": "d",
            "new.md": "n",
        }
    )
    bases = [
        base("/moved.md", "api v1", "mem_b"),
        base("/mine.md", "api v1", "mem_c"),
        base("/deleted.md", "d", "mem_x"),
        base("/lost.md", "l", "mem_y"),
    ]
    plan = stage_plan(current, files, bases, writable=True)
    assert [m.path for m in plan.put] == ["/fresh.md", "/moved.md"]
    assert plan.record == [base("/equal.md", "same", "mem_d")]
    assert plan.remove == ["/deleted.md"]  # its memory went; the agent's new.md stays
    assert plan.drop == ["/lost.md"]
    # A read-only mount shows the API's content whatever the files hold.
    strict = stage_plan(current, files, bases, writable=False)
    assert [m.path for m in strict.put] == ["/fresh.md", "/moved.md", "/mine.md"]
    assert sorted(strict.remove) == ["/deleted.md", "/new.md"]


def test_a_memory_with_memories_below_it_is_held_back_and_its_old_file_removed() -> None:
    """``/a`` beside ``/a/b``: a mount cannot hold both, so ``/a`` is not put
    (the agent is told) and a file it left from before goes, making room."""
    current = [memory("/a", "file", "mem_a"), memory("/a/b", "below", "mem_b")]
    plan = stage_plan(current, held(a="file"), [base("/a", "file", "mem_a")], writable=True)
    assert plan.held_back == ["/a"]
    assert [m.path for m in plan.put] == ["/a/b"]
    assert (plan.remove, plan.record) == (["/a"], [])


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return open_blob_store(BlobConfig(url=f"file://{tmp_path / 'blobs'}"))


async def _versions(store: SqlStore, workspace: str, store_id: str) -> int:
    page = await store.list_memory_versions(
        workspace, store_id, VersionFilter(), PageRequest(limit=100, order="desc")
    )
    return len(page.items)


@pytest.mark.anyio
@pytest.mark.parametrize("database_url", STORES, indirect=True)
async def test_a_write_back_commits_once_under_its_claim(
    store: SqlStore, blobs: BlobStore, embedder: Embedder
) -> None:
    keeper = MemoryKeeper(store, lambda: blobs, embedder, purge_interval=60, upload_grace=60)
    workspace = (await store.create_workspace("w")).id
    store_id = (await store.create_memory_store(workspace, "s", "", {})).id
    made = await keeper.create(workspace, store_id, "/m.md", "v0", API)
    memory_id = made.memory.id
    staged = MountBase(store_id, "/m.md", memory_id, sha("v0"))
    await store.put_memory_mount_bases(workspace, SESSION, [staged])
    # Another writer comes first; the agent's stale write is kept beside it.
    await keeper.write(
        workspace,
        store_id,
        memory_id,
        content="api",
        expected_sha256=None,
        actor=API,
        keep_stale=False,
    )
    claim = MountClaim(SESSION, "/m.md", sha("v0"))

    async def write_back() -> bool:
        written = await keeper.write(
            workspace,
            store_id,
            memory_id,
            content="agent",
            expected_sha256=sha("v0"),
            actor=AGENT,
            keep_stale=True,
            mount=claim,
        )
        return written.conflict

    assert await write_back()
    assert await store.memory_mount_bases(SESSION, store_id) == [
        MountBase(store_id, "/m.md", memory_id, sha("agent"))
    ]
    before = await _versions(store, workspace, store_id)
    # A crash before the caller heard of the commit: the same write-back again.
    with pytest.raises(Conflict) as caught:
        await write_back()
    assert caught.value.code == MOUNT_MOVED
    assert await _versions(store, workspace, store_id) == before
    assert len(await blobs.list("memories")) == before  # the refused version's blob went

    # A delete moves (drops) the base in its transaction, once.
    await store.put_memory_mount_bases(
        workspace, SESSION, [MountBase(store_id, "/m.md", memory_id, sha("api"))]
    )
    gone = MountClaim(SESSION, "/m.md", sha("api"))
    await keeper.delete(workspace, store_id, memory_id, sha("api"), AGENT, gone)
    assert await store.memory_mount_bases(SESSION, store_id) == []
    created = MountClaim(SESSION, "/n.md", None)
    await keeper.create(workspace, store_id, "/n.md", "new", AGENT, created)
    with pytest.raises(Conflict) as again:
        await keeper.create(workspace, store_id, "/n2.md", "new", AGENT, created)
    assert again.value.code == MOUNT_MOVED


@pytest.mark.anyio
@pytest.mark.parametrize("database_url", STORES, indirect=True)
async def test_sessions_list_by_memory_store_and_forget_it_when_deleted(store: SqlStore) -> None:
    workspace = (await store.create_workspace("w")).id
    agent = await store.create_agent(workspace, definition())
    env = await store.create_environment(workspace, "env", None, {"type": "cloud"}, {}, None)
    kept = (await store.create_memory_store(workspace, "kept", "", {})).id
    archived = (await store.create_memory_store(workspace, "old", "", {})).id
    await store.archive_memory_store(workspace, archived)

    async def create(*store_ids: str) -> str:
        resources = [{"type": "memory_store", "memory_store_id": s} for s in store_ids]
        session, _ = await store.create_session(
            workspace,
            (agent.id, None),
            lambda a: {"id": a.id},
            env.id,
            {"resources": resources},
            [],
        )
        return session.id

    first, _plain = await create(kept), await create()
    page = PageRequest(limit=10, order="desc")
    listed = await store.list_sessions(workspace, page, SessionFilter(memory_store_id=kept))
    assert [s.id for s in listed.items] == [first]
    for bad, error in (("memstore_unknown", NotFound), (archived, Conflict)):
        with pytest.raises(error, match=r"resources\.1\.memory_store_id"):
            await create(kept, bad)
    assert len((await store.list_sessions(workspace, page, SessionFilter())).items) == 2
    await store.put_memory_mount_bases(workspace, first, [MountBase(kept, "/a", "mem_1", "0")])
    await store.delete_session(workspace, first)
    assert await store.memory_mount_bases(first, kept) == []
    listed = await store.list_sessions(workspace, page, SessionFilter(memory_store_id=kept))
    assert listed.items == []


def test_memory_mounts_of_long_names_stay_within_a_directory_name() -> None:
    """Two stores whose 255-character names make one slug: the second's ``-2``
    is made room for. Before, its mount's name was 257 bytes, and every tool
    call of the session failed."""
    names = ["a" * 255, "A" * 255, "İ" * 255]
    paths = memory_mount_paths(names)
    slugs = [path.rsplit("/", 1)[1] for path in paths]
    assert len(set(slugs)) == 3 and all(len(s.encode()) <= NAME_MAX for s in slugs)
    assert slugs[:2] == ["a" * 255, "a" * 253 + "-2"]
    assert memory_mount_paths(["Team Notes", "team-notes"]) == [
        "/mnt/memory/team-notes",
        "/mnt/memory/team-notes-2",
    ]
