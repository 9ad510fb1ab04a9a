"""Memory versions through the official SDK: one per write, newest first, with
filters and paging; retrieve; redaction clears content and keeps the record."""

from __future__ import annotations

import hashlib

import anthropic
import pytest

from tests.databases import BACKENDS

pytestmark = pytest.mark.parametrize("server_on_each_store", BACKENDS, indirect=True)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_every_write_is_a_version(client_on_each_store: anthropic.Anthropic) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="history")
    memory = ms.memories.create(store.id, path="/h.md", content="one")
    ms.memories.update(memory.id, memory_store_id=store.id, content="two")
    ms.memories.update(memory.id, memory_store_id=store.id, path="/moved/h.md")
    other = ms.memories.create(store.id, path="/other.md", content="o")
    ms.memories.delete(memory.id, memory_store_id=store.id)

    versions = list(ms.memory_versions.list(store.id, limit=2))  # auto-paging, newest first
    assert [(v.memory_id, v.operation, v.path) for v in versions] == [
        (memory.id, "deleted", "/moved/h.md"),
        (other.id, "created", "/other.md"),
        (memory.id, "modified", "/moved/h.md"),
        (memory.id, "modified", "/h.md"),
        (memory.id, "created", "/h.md"),
    ]
    assert all(v.content is None for v in versions)  # view=basic on list
    assert [v.content_sha256 for v in versions] == [
        None,
        sha("o"),
        sha("two"),
        sha("two"),
        sha("one"),
    ]
    assert versions[0].content_size_bytes is None and versions[-1].content_size_bytes == 3
    key_id = versions[0].created_by.api_key_id  # type: ignore[union-attr]
    assert key_id.startswith("apikey_")
    assert all(v.created_by == versions[0].created_by for v in versions)

    full = ms.memory_versions.list(store.id, memory_id=memory.id, view="full", limit=100)
    assert [v.content for v in full.data] == [None, "two", "two", "one"]
    created = ms.memory_versions.list(store.id, operation="created")
    assert {v.memory_id for v in created.data} == {memory.id, other.id}
    mine = ms.memory_versions.list(store.id, api_key_id=key_id, limit=100)
    assert [v.id for v in mine] == [v.id for v in versions]
    assert ms.memory_versions.list(store.id, session_id="sesn_none").data == []
    newest = versions[0].created_at
    assert [v.id for v in ms.memory_versions.list(store.id, created_at_gte=newest)] == [
        versions[0].id
    ]
    assert len(list(ms.memory_versions.list(store.id, created_at_lte=versions[-1].created_at))) == 1

    one = ms.memory_versions.retrieve(versions[-1].id, memory_store_id=store.id)
    assert (one.content, one.operation, one.memory_store_id) == ("one", "created", store.id)
    basic = ms.memory_versions.retrieve(versions[-1].id, memory_store_id=store.id, view="basic")
    assert basic.content is None and basic.content_sha256 == sha("one")


def test_redaction_clears_content_and_keeps_the_record(
    client_on_each_store: anthropic.Anthropic,
) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="redact")
    memory = ms.memories.create(store.id, path="/secret.md", content="password=hunter2")
    current = ms.memories.update(memory.id, memory_store_id=store.id, content="nothing here")
    with pytest.raises(anthropic.ConflictError, match="current"):
        ms.memory_versions.redact(current.memory_version_id, memory_store_id=store.id)

    redacted = ms.memory_versions.redact(memory.memory_version_id, memory_store_id=store.id)
    assert redacted.redacted_at is not None
    assert (
        redacted.content,
        redacted.path,
        redacted.content_sha256,
        redacted.content_size_bytes,
    ) == (
        None,
        None,
        None,
        None,
    )
    assert redacted.redacted_by is not None and redacted.redacted_by.type == "api_actor"
    assert (
        redacted.created_by
        == ms.memory_versions.retrieve(
            current.memory_version_id, memory_store_id=store.id
        ).created_by
    )
    again = ms.memory_versions.retrieve(memory.memory_version_id, memory_store_id=store.id)
    assert again.model_dump() == redacted.model_dump()
    assert ms.memory_versions.redact(
        memory.memory_version_id, memory_store_id=store.id
    ).redacted_at == (redacted.redacted_at)  # idempotent
    listed = ms.memory_versions.list(store.id, view="full", limit=100).data
    assert [v.id for v in listed] == [current.memory_version_id, memory.memory_version_id]
    assert listed[1].content is None and listed[0].content == "nothing here"
    assert ms.memories.retrieve(memory.id, memory_store_id=store.id).content == "nothing here"


def test_unknown_versions_and_bad_queries(client_on_each_store: anthropic.Anthropic) -> None:
    ms = client_on_each_store.beta.memory_stores
    store = ms.create(name="unknown")
    with pytest.raises(anthropic.NotFoundError):
        ms.memory_versions.retrieve("memver_nothing", memory_store_id=store.id)
    with pytest.raises(anthropic.NotFoundError):
        ms.memory_versions.redact("memver_nothing", memory_store_id=store.id)
    with pytest.raises(anthropic.BadRequestError, match="operation"):
        client_on_each_store.get(
            f"/v1/memory_stores/{store.id}/memory_versions",
            cast_to=object,
            options={"params": {"operation": "renamed"}},
        )
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        ms.memory_versions.list(store.id, limit=101)


def test_versions_of_another_store_are_not_found(
    client_on_each_store: anthropic.Anthropic,
) -> None:
    ms = client_on_each_store.beta.memory_stores
    first, second = ms.create(name="one"), ms.create(name="two")
    memory = ms.memories.create(first.id, path="/x.md", content="x")
    with pytest.raises(anthropic.NotFoundError):
        ms.memory_versions.retrieve(memory.memory_version_id, memory_store_id=second.id)
    with pytest.raises(anthropic.NotFoundError):
        ms.memories.retrieve(memory.id, memory_store_id=second.id)
    assert ms.memory_versions.list(second.id).data == []
