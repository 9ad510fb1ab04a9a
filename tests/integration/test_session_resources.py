"""Session resources through the official SDK on a real server whose sandbox
provider (``unsafe_local``) cannot mount files nor clone repositories: every
call answers, and what cannot take effect is refused with a 400 naming the
field, storing nothing. (Mounting and cloning themselves, with real bubblewrap:
``tests/sandbox/test_session_files.py``, ``tests/sandbox/test_repositories.py``.)"""

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


def test_a_resource_of_an_unknown_type_is_refused_naming_it(
    client: anthropic.Anthropic,
) -> None:
    before = sessions_count(client)
    with pytest.raises(anthropic.BadRequestError, match=r"resources\.0"):
        new_session(client, resources=[{"type": "s3_bucket", "bucket": "b"}])
    assert sessions_count(client) == before


REPOSITORY = {"type": "github_repository", "url": "https://github.com/o/r"}
SHA = "0" * 40
MALFORMED = [
    ({"url": "http://github.com/o/r"}, r"resources\.0\.url: .*https://"),
    ({"url": "https://x-access-token:t@github.com/o/r"}, r"resources\.0\.url: .*credentials"),
    ({"url": "https://github.com/o/r?ref=main"}, r"resources\.0\.url: .*query"),
    ({"url": "https://github.com/"}, r"resources\.0\.url: .*name a repository"),
    ({"url": "https://github.com/o/../r"}, r"resources\.0\.url"),
    ({"url": "not a url"}, r"resources\.0\.url"),
    ({"checkout": {"type": "tag", "name": "v1"}}, r"resources\.0\.checkout"),
    ({"checkout": {"type": "commit", "sha": "abc"}}, r"resources\.0\.checkout\.sha"),
    ({"checkout": {"type": "branch", "name": "a..b"}}, r"resources\.0\.checkout\.name"),
    ({"checkout": {"type": "branch", "name": "-x"}}, r"resources\.0\.checkout\.name"),
    ({"mount_path": "/etc/r"}, r"resources\.0\.mount_path: .*/workspace/"),
    ({"mount_path": "/workspace/skills/r"}, r"resources\.0\.mount_path: .*skills"),
    ({"authorization_token": "a b"}, r"resources\.0\.authorization_token"),
    ({"authorization_token": ""}, r"resources\.0\.authorization_token"),
]
"""A change to a good repository resource, and the 400 it gets."""


def test_malformed_repository_resources_are_refused_naming_the_field(
    client: anthropic.Anthropic,
) -> None:
    agent = client.beta.agents.create(name="r", model="claude-sonnet-4-6")
    environment = client.beta.environments.create(name=f"r-{agent.id[-8:]}")
    before = sessions_count(client)
    for change, named in MALFORMED:
        with pytest.raises(anthropic.BadRequestError, match=named):
            client.beta.sessions.create(
                agent=agent.id,
                environment_id=environment.id,
                resources=[REPOSITORY | change],  # type: ignore[list-item]
            )
    assert sessions_count(client) == before


def test_repository_resources_are_refused_where_they_cannot_be_cloned(
    client: anthropic.Anthropic,
) -> None:
    token = "ghp_refused_token_4711"
    with pytest.raises(anthropic.BadRequestError, match="unsafe_local") as refused:
        new_session(client, resources=[REPOSITORY | {"authorization_token": token}])
    assert "resources" in str(refused.value) and token not in str(refused.value)
    twice = [REPOSITORY | {"checkout": {"type": "commit", "sha": SHA}}, REPOSITORY]
    with pytest.raises(anthropic.BadRequestError, match="/workspace/r"):
        new_session(client, resources=twice)
    session_id = new_session(client)
    added = f"/v1/sessions/{session_id}/resources"
    with pytest.raises(anthropic.BadRequestError, match=r"type: .*cannot clone repositories"):
        client.post(added, body=REPOSITORY, cast_to=object)
    with pytest.raises(anthropic.BadRequestError, match=r"\"url: 'ftp://h/o/r' must be an https"):
        client.post(added, body=REPOSITORY | {"url": "ftp://h/o/r"}, cast_to=object)
    assert client.beta.sessions.retrieve(session_id).resources == []


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
