"""Memories through the official SDK: create, retrieve, update (content, rename,
content-hash preconditions), list with prefixes, depth and paging, delete, and
bad input refused with a 400 naming the field and nothing stored."""

from __future__ import annotations

import hashlib

import anthropic
import pytest

from tests.databases import BACKENDS

pytestmark = pytest.mark.parametrize("server_on_each_store", BACKENDS, indirect=True)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_memory_lifecycle(client_on_each_store: anthropic.Anthropic) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="notes")
    made = ms.memories.create(store.id, path="/projects/stead/notes.md", content="héllo")
    assert made.id.startswith("mem_") and made.memory_version_id.startswith("memver_")
    assert made.content is None  # view=basic on create
    assert (made.content_sha256, made.content_size_bytes) == (sha("héllo"), 6)
    full = ms.memories.create(store.id, path="/empty.md", content="", view="full")
    assert (full.content, full.content_sha256, full.content_size_bytes) == ("", sha(""), 0)

    got = ms.memories.retrieve(made.id, memory_store_id=store.id)
    assert got.content == "héllo" and got.path == "/projects/stead/notes.md"
    assert ms.memories.retrieve(made.id, memory_store_id=store.id, view="basic").content is None

    changed = ms.memories.update(made.id, memory_store_id=store.id, content="v2", view="full")
    assert (changed.content, changed.content_sha256) == ("v2", sha("v2"))
    assert changed.memory_version_id != made.memory_version_id
    assert changed.updated_at > made.updated_at and changed.created_at == made.created_at

    moved = ms.memories.update(made.id, memory_store_id=store.id, path="/archive/notes.md")
    assert (moved.path, moved.content_sha256, moved.id) == ("/archive/notes.md", sha("v2"), made.id)
    assert ms.memories.retrieve(made.id, memory_store_id=store.id).content == "v2"

    same = ms.memories.update(made.id, memory_store_id=store.id, content="v2")
    assert same.memory_version_id == moved.memory_version_id  # nothing changed, no version

    deleted = ms.memories.delete(made.id, memory_store_id=store.id)
    assert (deleted.id, deleted.type) == (made.id, "memory_deleted")
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.retrieve(made.id, memory_store_id=store.id)
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.delete(made.id, memory_store_id=store.id)
    # The path is free again.
    again = ms.memories.create(store.id, path="/archive/notes.md", content="new")
    assert again.id != made.id


def test_path_conflicts_name_the_memory_that_holds_the_path(
    client_on_each_store: anthropic.Anthropic,
) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="conflicts")
    first = ms.memories.create(store.id, path="/a.md", content="a")
    other = ms.memories.create(store.id, path="/b.md", content="b")
    with pytest.raises(anthropic.ConflictError) as caught:
        ms.memories.create(store.id, path="/a.md", content="again")
    details = caught.value.body["error"]["details"]  # type: ignore[index]
    assert details == {
        "error_code": "memory_path_conflict_error",
        "conflicting_memory_id": first.id,
    }
    assert caught.value.response.headers["x-should-retry"] == "false"
    with pytest.raises(anthropic.ConflictError, match="path"):
        ms.memories.update(other.id, memory_store_id=store.id, path="/a.md")
    assert ms.memories.retrieve(other.id, memory_store_id=store.id).path == "/b.md"
    versions = ms.memory_versions.list(store.id, limit=100)
    assert len(versions.data) == 2  # the refused writes left no version behind


def test_content_hash_preconditions(client_on_each_store: anthropic.Anthropic) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="preconditions")
    memory = ms.memories.create(store.id, path="/p.md", content="one")
    ok = ms.memories.update(
        memory.id,
        memory_store_id=store.id,
        content="two",
        precondition={"type": "content_sha256", "content_sha256": sha("one")},
    )
    assert ok.content_sha256 == sha("two")
    with pytest.raises(anthropic.ConflictError) as caught:
        ms.memories.update(
            memory.id,
            memory_store_id=store.id,
            content="three",
            precondition={"type": "content_sha256", "content_sha256": sha("one")},
        )
    assert caught.value.body["error"]["details"]["error_code"] == (  # type: ignore[index]
        "memory_precondition_failed_error"
    )
    assert "precondition.content_sha256" in caught.value.message
    assert ms.memories.retrieve(memory.id, memory_store_id=store.id).content == "two"
    with pytest.raises(anthropic.ConflictError):
        ms.memories.delete(memory.id, memory_store_id=store.id, expected_content_sha256=sha("one"))
    ms.memories.delete(memory.id, memory_store_id=store.id, expected_content_sha256=sha("two"))
    operations = [v.operation for v in ms.memory_versions.list(store.id, memory_id=memory.id)]
    assert operations == ["deleted", "modified", "created"]


def test_list_with_prefixes_depth_and_paging(client_on_each_store: anthropic.Anthropic) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="tree")
    paths = [
        "/a.md",
        "/notes/todo.md",
        "/notes/2026/jan.md",
        "/notes/2026/feb.md",
        "/notes-archive/old.md",
        "/notes/zeta/deep/x.md",
        "/z.md",
    ]
    ids = {p: ms.memories.create(store.id, path=p, content=p).id for p in paths}

    every = [m.path for m in ms.memories.list(store.id, limit=2)]  # auto-paging
    assert every == sorted(paths, key=lambda p: p.encode())
    first = ms.memories.list(store.id, limit=3)
    assert len(first.data) == 3 and first.next_page

    notes = [m.path for m in ms.memories.list(store.id, path_prefix="/notes/")]
    assert notes == [
        "/notes/2026/feb.md",
        "/notes/2026/jan.md",
        "/notes/todo.md",
        "/notes/zeta/deep/x.md",
    ]

    top = [(m.type, m.path) for m in ms.memories.list(store.id, depth=1, limit=1)]
    assert top == [
        ("memory", "/a.md"),
        ("memory_prefix", "/notes-archive/"),
        ("memory_prefix", "/notes/"),
        ("memory", "/z.md"),
    ]
    below = [(m.type, m.path) for m in ms.memories.list(store.id, path_prefix="/notes/", depth=1)]
    assert below == [
        ("memory_prefix", "/notes/2026/"),
        ("memory", "/notes/todo.md"),
        ("memory_prefix", "/notes/zeta/"),
    ]
    two = [m.path for m in ms.memories.list(store.id, path_prefix="/notes/", depth=2)]
    assert two == [
        "/notes/2026/feb.md",
        "/notes/2026/jan.md",
        "/notes/todo.md",
        "/notes/zeta/deep/",
    ]
    # Deeper than any path can be: everything below the prefix, as depth 0 lists.
    deepest = [m.path for m in ms.memories.list(store.id, path_prefix="/notes/", depth=50)]
    assert deepest == [m.path for m in ms.memories.list(store.id, path_prefix="/notes/")]

    full = ms.memories.list(store.id, path_prefix="/notes/2026/", view="full", limit=100)
    assert [(m.content, m.id) for m in full.data] == [  # type: ignore[union-attr]
        ("/notes/2026/feb.md", ids["/notes/2026/feb.md"]),
        ("/notes/2026/jan.md", ids["/notes/2026/jan.md"]),
    ]
    basic = ms.memories.list(store.id, path_prefix="/notes/2026/")
    assert all(m.content is None for m in basic.data)  # type: ignore[union-attr]
    assert ms.memories.list(store.id, path_prefix="/nothing/").data == []


def test_a_cursor_is_bound_to_its_listing(client_on_each_store: anthropic.Anthropic) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="cursors")
    for name in "abc":
        ms.memories.create(store.id, path=f"/d/{name}.md", content=name)
    page = ms.memories.list(store.id, limit=1)
    assert page.next_page
    with pytest.raises(anthropic.BadRequestError, match="page"):
        ms.memories.list(store.id, limit=1, page=page.next_page, path_prefix="/d/")


def test_an_archived_store_is_read_only_but_deletable(
    client_on_each_store: anthropic.Anthropic,
) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="frozen")
    memory = ms.memories.create(store.id, path="/keep.md", content="k")
    ms.archive(store.id)
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        ms.memories.create(store.id, path="/new.md", content="n")
    for unchanged in ({"content": "changed"}, {"content": "k"}, {}):  # a no-op too
        with pytest.raises(anthropic.BadRequestError, match="archived"):
            ms.memories.update(memory.id, memory_store_id=store.id, **unchanged)  # type: ignore[arg-type]
    assert ms.memories.retrieve(memory.id, memory_store_id=store.id).content == "k"
    assert [m.path for m in ms.memories.list(store.id)] == ["/keep.md"]
    ms.memories.delete(memory.id, memory_store_id=store.id)
    version = ms.memory_versions.list(store.id, operation="created").data[0]
    assert ms.memory_versions.redact(version.id, memory_store_id=store.id).redacted_at is not None
    ms.delete(store.id)
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.list(store.id)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"path": "no-slash.md", "content": ""}, "path"),
        ({"path": "/a/../../etc/passwd", "content": ""}, "path"),
        ({"path": "/a/./b", "content": ""}, "path"),
        ({"path": "/a//b", "content": ""}, "path"),
        ({"path": "/dir/", "content": ""}, "path"),
        ({"path": "/", "content": ""}, "path"),
        ({"path": "/a\x00b", "content": ""}, "path"),
        ({"path": "/a\u2028b", "content": ""}, "path"),
        ({"path": "/a\u200bb", "content": ""}, "path"),
        ({"path": "/cafe\u0301", "content": ""}, "path"),
        ({"path": "/" + "x" * 1024, "content": ""}, "path"),
        ({"path": "/a" * 21, "content": ""}, "path"),
        # Each memory is a file in the sessions that mount its store.
        ({"path": "/" + "y" * 256, "content": ""}, "path"),
        ({"path": "/d/.stead-put-0123456789abcdef", "content": ""}, "path"),
        ({"path": "/big.md", "content": "x" * 102_401}, "content"),
        ({"path": "/big.md", "content": "é" * 51_201}, "content"),
        ({"path": "/n.md", "content": None}, "content"),
        ({"path": "/n.md"}, "content"),
        ({"content": "x"}, "path"),
        ({"path": "/n.md", "content": "x", "mode": "w"}, "mode"),
    ],
)
def test_bad_memory_bodies_are_400_naming_the_field(
    client_on_each_store: anthropic.Anthropic, body: dict[str, object], field: str
) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="bad-input")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client_on_each_store.post(
            f"/v1/memory_stores/{store.id}/memories", cast_to=object, body=body
        )
    assert caught.value.body["error"]["message"].startswith(field), caught.value.message  # type: ignore[index]
    assert ms.memories.list(store.id).data == []
    assert ms.memory_versions.list(store.id).data == []


def test_the_largest_content_and_path_are_accepted(
    client_on_each_store: anthropic.Anthropic,
) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="limits")
    path = "/" + "/".join(["s" * 49] * 19 + ["s" * 73])
    assert len(path.encode()) == 1024
    content = "x" * 102_400
    made = ms.memories.create(store.id, path=path, content=content)
    assert made.content_size_bytes == 102_400
    assert ms.memories.retrieve(made.id, memory_store_id=store.id).content == content


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"precondition": {"type": "content_sha256", "content_sha256": "ABC"}}, "precondition"),
        ({"precondition": {"type": "content_sha256", "content_sha256": "A" * 64}}, "precondition"),
        ({"precondition": {"type": "content_sha256"}}, "precondition"),
        ({"precondition": {"type": "etag", "value": "x"}}, "precondition"),
        ({"path": "../escape"}, "path"),
        ({"content": "x" * 102_401}, "content"),
    ],
)
def test_bad_updates_are_400_and_change_nothing(
    client_on_each_store: anthropic.Anthropic, change: dict[str, object], field: str
) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="bad-updates")
    memory = ms.memories.create(store.id, path="/m.md", content="m")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client_on_each_store.post(
            f"/v1/memory_stores/{store.id}/memories/{memory.id}", cast_to=object, body=change
        )
    assert caught.value.body["error"]["message"].startswith(field), caught.value.message  # type: ignore[index]
    assert ms.memories.retrieve(memory.id, memory_store_id=store.id).content == "m"


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"path_prefix": "/notes"}, "path_prefix"),
        ({"path_prefix": "notes/"}, "path_prefix"),
        ({"path_prefix": "/../"}, "path_prefix"),
        ({"depth": -1}, "depth"),
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"view": "everything"}, "view"),
        ({"page": "page_forged.x"}, "page"),
    ],
)
def test_bad_list_queries_are_400(
    client_on_each_store: anthropic.Anthropic, query: dict[str, object], field: str
) -> None:
    store = client_on_each_store.beta.memory_stores.create(name="bad-queries")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client_on_each_store.get(
            f"/v1/memory_stores/{store.id}/memories", cast_to=object, options={"params": query}
        )
    assert caught.value.body["error"]["message"].startswith(field), caught.value.message  # type: ignore[index]


def test_bad_expected_hash_on_delete_is_400(client_on_each_store: anthropic.Anthropic) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="bad-delete")
    memory = ms.memories.create(store.id, path="/m.md", content="m")
    with pytest.raises(anthropic.BadRequestError, match="expected_content_sha256"):
        ms.memories.delete(memory.id, memory_store_id=store.id, expected_content_sha256="nope")
    assert ms.memories.retrieve(memory.id, memory_store_id=store.id).content == "m"
