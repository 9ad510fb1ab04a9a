"""Session resources through the official SDK on a real server whose sandbox
provider (``unsafe_local``) cannot mount files: every call answers, and what
cannot take effect is refused with a 400 naming the field, storing nothing.
(Mounting itself, with real bubblewrap: ``tests/sandbox/test_session_files.py``.)"""

from __future__ import annotations

import io
from typing import Any

import anthropic
import pytest


def new_session(client: anthropic.Anthropic, **create: Any) -> str:
    agent = client.beta.agents.create(name="r", model="claude-sonnet-4-6")
    environment = client.beta.environments.create(name=f"r-{agent.id[-8:]}")
    return client.beta.sessions.create(agent=agent.id, environment_id=environment.id, **create).id


def sessions_count(client: anthropic.Anthropic) -> int:
    return len(list(client.beta.sessions.list(limit=100)))


def test_resources_stead_does_not_mount_yet_are_refused_by_type(
    client: anthropic.Anthropic,
) -> None:
    before = sessions_count(client)
    with pytest.raises(anthropic.BadRequestError, match="github_repository"):
        new_session(
            client, resources=[{"type": "github_repository", "url": "https://github.com/a/b"}]
        )
    assert sessions_count(client) == before


def test_file_resources_are_refused_where_files_cannot_be_mounted(
    client: anthropic.Anthropic,
) -> None:
    file_id = client.beta.files.upload(file=("a.txt", io.BytesIO(b"a"), "text/plain")).id
    before = sessions_count(client)
    with pytest.raises(anthropic.BadRequestError, match="unsafe_local") as refused:
        new_session(client, resources=[{"type": "file", "file_id": file_id}])
    assert "resources" in str(refused.value)
    store_id = client.beta.memory_stores.create(name="m").id
    with pytest.raises(anthropic.BadRequestError, match=r"resources\.0: .*unsafe_local"):
        new_session(client, resources=[{"type": "memory_store", "memory_store_id": store_id}])
    assert sessions_count(client) == before
    session_id = new_session(client)
    with pytest.raises(anthropic.BadRequestError, match="cannot mount files"):
        client.beta.sessions.resources.add(session_id, type="file", file_id=file_id)
    assert client.beta.sessions.retrieve(session_id).resources == []


def test_resource_calls_on_unknown_ids_and_bad_bodies(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    assert client.beta.sessions.resources.list(session_id).data == []
    resources = client.beta.sessions.resources
    with pytest.raises(anthropic.NotFoundError, match="sesrsc_missing"):
        resources.retrieve("sesrsc_missing", session_id=session_id)
    with pytest.raises(anthropic.NotFoundError, match="sesrsc_missing"):
        resources.update("sesrsc_missing", session_id=session_id, authorization_token="t")
    with pytest.raises(anthropic.NotFoundError, match="sesrsc_missing"):
        resources.delete("sesrsc_missing", session_id=session_id)
    with pytest.raises(anthropic.NotFoundError, match="sesn_missing"):
        resources.list("sesn_missing")
    with pytest.raises(anthropic.BadRequestError, match="file_id"):
        resources.add(session_id, type="file", file_id="not-a-file-id")
    with pytest.raises(anthropic.BadRequestError, match="type"):
        client.post(
            f"/v1/sessions/{session_id}/resources",
            body={"type": "memory_store", "file_id": "file_x"},
            cast_to=object,
        )
    with pytest.raises(anthropic.BadRequestError, match="authorization_token"):
        client.post(f"/v1/sessions/{session_id}/resources/sesrsc_x", body={}, cast_to=object)
