"""Memory stores through the official SDK: create, retrieve, update, list with
paging and filters, archive, delete, bad input and other workspaces."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import anthropic
import pytest

from stead.testing import ServerProcess
from tests.conftest import make_client, sdk_of
from tests.databases import BACKENDS

pytestmark = pytest.mark.parametrize("server_on_each_store", BACKENDS, indirect=True)


def test_store_lifecycle(client_on_each_store: anthropic.Anthropic) -> None:
    stores = client_on_each_store.beta.memory_stores
    store = stores.create(name="Team Notes", description="what we learnt", metadata={"a": "1"})
    assert store.id.startswith("memstore_") and store.type == "memory_store"
    assert (store.name, store.description, store.metadata) == (
        "Team Notes",
        "what we learnt",
        {"a": "1"},
    )
    assert store.archived_at is None
    changed = stores.update(store.id, name="Notes", description="", metadata={"b": "2", "a": None})
    assert (changed.name, changed.description, changed.metadata) == ("Notes", "", {"b": "2"})
    assert changed.updated_at > store.updated_at
    assert stores.retrieve(store.id).model_dump() == changed.model_dump()
    archived = stores.archive(store.id)
    assert archived.archived_at is not None
    assert stores.archive(store.id).archived_at == archived.archived_at  # idempotent
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        stores.update(store.id, name="again")
    deleted = stores.delete(store.id)
    assert (deleted.id, deleted.type) == (store.id, "memory_store_deleted")
    with pytest.raises(anthropic.NotFoundError):
        stores.retrieve(store.id)
    with pytest.raises(anthropic.NotFoundError):
        stores.delete(store.id)


def test_list_pages_and_filters(client_on_each_store: anthropic.Anthropic) -> None:
    stores = client_on_each_store.beta.memory_stores
    tag = uuid.uuid4().hex[:8]
    made = [stores.create(name=f"{tag}-{i}") for i in range(5)]
    stores.archive(made[0].id)
    since = made[0].created_at - timedelta(microseconds=1)
    seen = [s.id for s in stores.list(limit=2, created_at_gte=since)]
    assert seen == [s.id for s in reversed(made[1:])]  # newest first, archived left out
    first = stores.list(limit=2, created_at_gte=since)
    assert len(first.data) == 2 and first.next_page
    every = [s.id for s in stores.list(limit=100, include_archived=True, created_at_gte=since)]
    assert every == [s.id for s in reversed(made)]
    until = [
        s.id
        for s in stores.list(limit=100, created_at_lte=made[2].created_at, created_at_gte=since)
    ]
    assert until == [made[2].id, made[1].id]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 256}, "name"),
        ({"name": "a\nb"}, "name"),
        ({"name": "n", "description": "d" * 1025}, "description"),
        ({"name": "n", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"name": "n", "colour": "blue"}, "colour"),
        ({}, "name"),
    ],
)
def test_bad_store_bodies_are_400_naming_the_field(
    client_on_each_store: anthropic.Anthropic, body: dict[str, object], field: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client_on_each_store.post("/v1/memory_stores", cast_to=object, body=body)
    assert field in caught.value.message


def test_other_workspaces_see_404(server_on_each_store: ServerProcess) -> None:
    server = server_on_each_store
    other_key = server.create_key(new_workspace=f"other-{uuid.uuid4().hex[:6]}")
    with sdk_of(server) as mine, make_client(server.url, other_key) as theirs:
        store = mine.beta.memory_stores.create(name="private")
        memory = mine.beta.memory_stores.memories.create(store.id, path="/a.md", content="x")
        calls = [
            lambda: theirs.beta.memory_stores.retrieve(store.id),
            lambda: theirs.beta.memory_stores.update(store.id, name="mine now"),
            lambda: theirs.beta.memory_stores.archive(store.id),
            lambda: theirs.beta.memory_stores.delete(store.id),
            lambda: theirs.beta.memory_stores.memories.list(store.id),
            lambda: theirs.beta.memory_stores.memories.create(store.id, path="/b.md", content=""),
            lambda: theirs.beta.memory_stores.memories.retrieve(
                memory.id, memory_store_id=store.id
            ),
            lambda: theirs.beta.memory_stores.memories.update(
                memory.id, memory_store_id=store.id, content="y"
            ),
            lambda: theirs.beta.memory_stores.memories.delete(memory.id, memory_store_id=store.id),
            lambda: theirs.beta.memory_stores.memory_versions.list(store.id),
            lambda: theirs.beta.memory_stores.memory_versions.retrieve(
                memory.memory_version_id, memory_store_id=store.id
            ),
            lambda: theirs.beta.memory_stores.memory_versions.redact(
                memory.memory_version_id, memory_store_id=store.id
            ),
        ]
        for call in calls:
            with pytest.raises(anthropic.NotFoundError):
                call()
        assert store.id not in {s.id for s in theirs.beta.memory_stores.list(limit=100)}
        kept = mine.beta.memory_stores.memories.retrieve(memory.id, memory_store_id=store.id)
        assert kept.content == "x"
        assert datetime.now(UTC) - kept.created_at < timedelta(hours=1)
