"""stead's semantic search over a memory store (``POST /v1/memory_stores/{id}/search``)
through the SDK's raw ``post``: ranked by meaning, citing memory ids and versions,
filtered by prefix, following updates and deletes; bad input is a 400 naming the
field; another workspace's store is a 404."""

from __future__ import annotations

import uuid
from typing import Any

import anthropic
import pytest

from stead.testing import ServerProcess
from tests.conftest import make_client, sdk_of


def search(client: anthropic.Anthropic, store_id: str, **body: Any) -> list[dict[str, Any]]:
    answer = client.post(f"/v1/memory_stores/{store_id}/search", cast_to=object, body=body)
    assert isinstance(answer, dict)
    hits: list[dict[str, Any]] = answer["data"]
    return hits


def test_search_ranks_by_meaning_and_cites_versions(client: anthropic.Anthropic) -> None:
    ms = client.beta.memory_stores
    store = ms.create(name="search")
    made = {
        path: ms.memories.create(store.id, path=path, content=text)
        for path, text in {
            "/pets/dog.md": "Walk the dog twice a day and feed her after the evening walk.",
            "/ops/backup.md": "Database backups run nightly and are kept for thirty days.",
            "/ops/oncall.md": "The on-call engineer answers pages within fifteen minutes.",
        }.items()
    }
    hits = search(client, store.id, query="how long do we keep database snapshots?", limit=2)
    assert len(hits) == 2
    best = hits[0]
    assert best["type"] == "memory_search_result"
    assert (best["memory_id"], best["memory_version_id"], best["path"]) == (
        made["/ops/backup.md"].id,
        made["/ops/backup.md"].memory_version_id,
        "/ops/backup.md",
    )
    assert best["score"] > hits[1]["score"]
    pets = search(client, store.id, query="backups", path_prefix="/pets/")
    assert [h["path"] for h in pets] == ["/pets/dog.md"]

    updated = ms.memories.update(
        made["/pets/dog.md"].id,
        memory_store_id=store.id,
        content="Snapshots of the database go to S3.",
    )
    ms.memories.delete(made["/ops/backup.md"].id, memory_store_id=store.id)
    hits = search(client, store.id, query="how long do we keep database snapshots?")
    assert hits[0]["memory_id"] == updated.id
    assert hits[0]["memory_version_id"] == updated.memory_version_id
    assert made["/ops/backup.md"].id not in {h["memory_id"] for h in hits}


def test_a_memory_counts_its_first_256_tokens_however_it_is_spaced(
    client: anthropic.Anthropic,
) -> None:
    # Before, only the first 2,048 characters were tokenized: a memory whose
    # start is spaced out (indented, padded tables) lost the words after them.
    ms = client.beta.memory_stores
    store = ms.create(name="spaced")
    padded = ms.memories.create(
        store.id,
        path="/padded.md",
        content="Notes" + " " * 3000 + "Database backups run nightly and are kept for thirty days.",
    )
    ms.memories.create(store.id, path="/dog.md", content="Walk the dog twice a day.")
    hits = search(client, store.id, query="how long do we keep database backups?")
    assert hits[0]["memory_id"] == padded.id
    assert hits[0]["score"] > 0.5


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "query"),
        ({"query": "  "}, "query"),
        ({"query": 3}, "query"),
        ({"query": "q" * 2001}, "query"),
        ({"query": "q", "limit": 0}, "limit"),
        ({"query": "q", "limit": True}, "limit"),
        ({"query": "q", "path_prefix": "/no-slash"}, "path_prefix"),
        ({"query": "q", "path_prefix": "/../"}, "path_prefix"),
        ({"query": "q", "top_k": 3}, "top_k"),
    ],
)
def test_bad_searches_are_400_naming_the_field(
    client: anthropic.Anthropic, body: dict[str, Any], field: str
) -> None:
    store = client.beta.memory_stores.create(name="bad-search")
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.post(f"/v1/memory_stores/{store.id}/search", cast_to=object, body=body)
    assert str(caught.value.body["error"]["message"]).startswith(field)  # type: ignore[index]


def test_another_workspace_cannot_search(server: ServerProcess) -> None:
    other_key = server.create_key(new_workspace=f"other-{uuid.uuid4().hex[:6]}")
    with sdk_of(server) as mine, make_client(server.url, other_key) as theirs:
        store = mine.beta.memory_stores.create(name="private-search")
        mine.beta.memory_stores.memories.create(store.id, path="/s.md", content="secret plans")
        with pytest.raises(anthropic.NotFoundError):
            search(theirs, store.id, query="plans")
        assert [h["path"] for h in search(mine, store.id, query="plans")] == ["/s.md"]
