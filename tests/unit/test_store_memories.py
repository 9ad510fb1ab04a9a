"""Memory stores on every store: an archived store is read-only and refused to new
sessions, listings roll deep paths up into prefixes and page past them, versions
filter by author and redact, and search reads the current content's vectors."""

from __future__ import annotations

import hashlib

import pytest

from stead.ids import new_id
from stead.store import (
    Actor,
    Conflict,
    MemoryPrefix,
    MemoryRecord,
    MemoryWrite,
    NewVersion,
    NotFound,
    PageRequest,
    SqlStore,
    StoreFilter,
    VersionFilter,
)
from tests.databases import STORES
from tests.unit.conftest import definition

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
API = Actor("api_actor", "apikey_a")
AGENT = Actor("session_actor", "sesn_a")


async def _write(
    store: SqlStore,
    workspace: str,
    store_id: str,
    path: str,
    text: str,
    actor: Actor = API,
    memory_id: str | None = None,
) -> MemoryWrite:
    """A memory's create (or, given ``memory_id``, its write) as ``MemoryKeeper`` makes it."""
    version = new_id("memory_version")
    digest = hashlib.sha256(text.encode()).hexdigest()
    await store.begin_memory_version(
        NewVersion(
            version,
            workspace,
            store_id,
            memory_id or new_id("memory"),
            path,
            digest,
            len(text),
            f"memories/{version}",
            actor,
            text.encode(),
        )
    )
    if memory_id is None:
        return await store.commit_memory_create(workspace, version)
    return await store.commit_memory_write(workspace, version, None, keep_stale=False)


async def test_an_archived_store_is_read_only_and_refused_to_new_sessions(
    store: SqlStore,
) -> None:
    workspace = (await store.create_workspace("w")).id
    kept = await store.create_memory_store(workspace, "kept", "", {"k": "v"})
    gone = await store.create_memory_store(workspace, "gone", "d", {})
    made = await _write(store, workspace, gone.id, "/a.md", "a")
    archived = await store.archive_memory_store(workspace, gone.id)
    assert (
        await store.archive_memory_store(workspace, gone.id)
    ).archived_at == archived.archived_at
    with pytest.raises(Conflict) as refused:
        await _write(store, workspace, gone.id, "/b.md", "b")
    assert refused.value.code == "memory_store_archived"
    with pytest.raises(Conflict):
        await store.update_memory_store(workspace, gone.id, lambda s: {"name": "x"})
    await store.delete_memory(
        workspace, gone.id, made.memory.id, None, API, new_id("memory_version")
    )
    renamed = await store.update_memory_store(workspace, kept.id, lambda s: {"name": "renamed"})
    assert (renamed.name, renamed.metadata) == ("renamed", {"k": "v"})
    page = PageRequest(limit=10, order="asc")
    live = await store.list_memory_stores(workspace, page, StoreFilter())
    every = await store.list_memory_stores(workspace, page, StoreFilter(include_archived=True))
    assert [s.id for s in live.items] == [kept.id]
    assert [s.id for s in every.items] == [kept.id, gone.id]

    agent = await store.create_agent(workspace, definition())
    env = await store.create_environment(workspace, "env", None, {"type": "cloud"}, {}, None)

    async def session_taking(store_id: str) -> None:
        resources = [{"type": "memory_store", "memory_store_id": store_id}]
        fields = {"resources": resources}
        await store.create_session(workspace, (agent.id, None), lambda a: {}, env.id, fields, [])

    with pytest.raises(Conflict) as archived_one:
        await session_taking(gone.id)
    assert archived_one.value.code == "memory_store_archived"
    with pytest.raises(NotFound) as missing:
        await session_taking("memstore_missing")
    assert missing.value.field == "resources.0.memory_store_id"
    await session_taking(kept.id)
    elsewhere = (await store.create_workspace("o")).id
    with pytest.raises(NotFound):
        await store.get_memory_store(elsewhere, kept.id)


async def test_listings_roll_deep_paths_up_and_page_past_them(store: SqlStore) -> None:
    workspace = (await store.create_workspace("w")).id
    store_id = (await store.create_memory_store(workspace, "s", "", {})).id
    paths = ["/a.md", "/b/one.md", "/b/two.md", "/b/c/deep.md", "/b0.md", "/z.md"]
    for path in paths:
        await _write(store, workspace, store_id, path, path)

    def shown(items: list[MemoryRecord | MemoryPrefix]) -> list[str]:
        return [i.path for i in items]

    flat = await store.list_memories(workspace, store_id, "/", 0, None, 100)
    assert shown(flat.items) == sorted(paths) and not flat.has_next
    top = await store.list_memories(workspace, store_id, "/", 1, None, 2)
    assert shown(top.items) == ["/a.md", "/b/"] and top.has_next
    rest = await store.list_memories(workspace, store_id, "/", 1, "/b/", 10)
    assert shown(rest.items) == ["/b0.md", "/z.md"] and not rest.has_next
    below = await store.list_memories(workspace, store_id, "/b/", 1, None, 10)
    assert shown(below.items) == ["/b/c/", "/b/one.md", "/b/two.md"]
    vectors = await store.memory_vectors(workspace, store_id, "/b/")
    assert sorted(v.path for v in vectors) == ["/b/c/deep.md", "/b/one.md", "/b/two.md"]
    assert {v.embedding for v in vectors} == {b"/b/c/deep.md", b"/b/one.md", b"/b/two.md"}


async def test_versions_filter_by_author_and_only_an_old_one_is_redacted(
    store: SqlStore,
) -> None:
    workspace = (await store.create_workspace("w")).id
    store_id = (await store.create_memory_store(workspace, "s", "", {})).id
    first = await _write(store, workspace, store_id, "/m.md", "one")
    memory_id = first.memory.id
    second = await _write(store, workspace, store_id, "/n.md", "two", AGENT, memory_id)
    assert second.memory.path == "/n.md" and second.memory.created_at == first.memory.created_at
    page = PageRequest(limit=10, order="asc")
    by_agent = await store.list_memory_versions(
        workspace, store_id, VersionFilter(actors=(AGENT,)), page
    )
    assert [v.id for v in by_agent.items] == [second.version.id]
    both = VersionFilter(actors=(AGENT, API))
    assert (await store.list_memory_versions(workspace, store_id, both, page)).items == []
    with pytest.raises(Conflict, match="current content"):
        await store.redact_memory_version(workspace, store_id, second.version.id, API)
    redacted = await store.redact_memory_version(workspace, store_id, first.version.id, API)
    assert (redacted.path, redacted.content_sha256, redacted.blob_key) == (None, None, None)
    assert redacted.redacted_by == API and redacted.created_by == API
    again = await store.redact_memory_version(workspace, store_id, first.version.id, AGENT)
    assert again == redacted
    await store.delete_memory(workspace, store_id, memory_id, None, AGENT, new_id("memory_version"))
    with pytest.raises(NotFound):
        await store.get_memory(workspace, store_id, memory_id)
    ops = await store.list_memory_versions(
        workspace, store_id, VersionFilter(memory_id=memory_id), page
    )
    assert [v.operation for v in ops.items] == ["created", "modified", "deleted"]
    created = VersionFilter(operation="created")
    assert len((await store.list_memory_versions(workspace, store_id, created, page)).items) == 1
