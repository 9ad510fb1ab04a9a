"""Workspaces: each key sees only its own workspace's resources; others' ids are 404."""

from __future__ import annotations

import uuid

import anthropic
import httpx2
import pytest

from stead.testing import ServerProcess, client_tls
from tests.conftest import make_client
from tests.integration.helpers import message

IDEMPOTENCY = "Idempotency-Key"


def test_two_workspaces_see_only_their_own(server: ServerProcess, api_key: str) -> None:
    other_key = server.create_key(new_workspace=f"other-{uuid.uuid4().hex[:6]}")
    with make_client(server.url, api_key) as mine, make_client(server.url, other_key) as theirs:
        agent = mine.beta.agents.create(name="private", model="claude-sonnet-4-6")
        env = mine.beta.environments.create(name=f"iso-{uuid.uuid4().hex[:8]}")
        session = mine.beta.sessions.create(agent=agent.id, environment_id=env.id)
        mine.beta.sessions.events.send(session.id, events=[message("secret")])
        their_agent = theirs.beta.agents.create(name="theirs", model="claude-sonnet-4-6")

        assert agent.id not in {a.id for a in theirs.beta.agents.list(include_archived=True)}
        assert env.id not in {e.id for e in theirs.beta.environments.list(include_archived=True)}
        assert session.id not in {s.id for s in theirs.beta.sessions.list(include_archived=True)}
        assert their_agent.id not in {a.id for a in mine.beta.agents.list(limit=100)}

        calls = [
            lambda: theirs.beta.agents.retrieve(agent.id),
            lambda: theirs.beta.agents.update(agent.id, name="stolen"),
            lambda: theirs.beta.agents.archive(agent.id),
            lambda: theirs.beta.agents.versions.list(agent.id),
            lambda: theirs.beta.environments.retrieve(env.id),
            lambda: theirs.beta.environments.delete(env.id),
            lambda: theirs.beta.sessions.retrieve(session.id),
            lambda: theirs.beta.sessions.events.list(session.id),
            lambda: theirs.beta.sessions.events.send(session.id, events=[message("x")]),
            lambda: theirs.beta.sessions.delete(session.id),
            lambda: theirs.beta.sessions.create(agent=agent.id, environment_id=env.id),
        ]
        for call in calls:
            with pytest.raises(anthropic.NotFoundError):
                call()
        with pytest.raises(anthropic.NotFoundError), theirs.beta.sessions.events.stream(session.id):
            pass
        assert mine.beta.agents.retrieve(agent.id).name == "private"
        mine_only = mine.beta.sessions.events.list(session.id, types=["user.message"])
        assert len(list(mine_only)) == 1


def test_keys_are_required_and_checked(server: ServerProcess) -> None:
    with (
        make_client(server.url, "sk-stead-wrong") as wrong,
        pytest.raises(anthropic.AuthenticationError),
    ):
        wrong.beta.agents.list()


def test_a_refused_caller_is_not_replayed_an_admins_answer(server: ServerProcess) -> None:
    """An admin's keyed request on another workspace's limits, then a plain key of
    the admin's workspace with the same Idempotency-Key and body: the plain key
    is refused (403), not replayed the other workspace's limits and use; and its
    refusal does not take the key from the admin's retry."""
    other = server.create_key(new_workspace=f"other-{uuid.uuid4().hex[:6]}")
    admin, plain = server.create_key(admin=True), server.create_key()
    with (
        keyed_http(server, other) as theirs,
        keyed_http(server, admin) as operator,
        keyed_http(server, plain) as mine,
    ):
        their_workspace = theirs.get("/v1/stead/limits").json()["workspace_id"]
        path = f"/v1/stead/workspaces/{their_workspace}/limits"
        body = {"monthly_tokens": 123_456}
        first_key, second_key = (str(uuid.uuid4()) for _ in range(2))

        assert operator.post(path, json=body, headers={IDEMPOTENCY: first_key}).status_code == 200
        refused = mine.post(path, json=body, headers={IDEMPOTENCY: first_key})
        assert refused.status_code == 403, refused.text
        assert their_workspace not in refused.text

        assert mine.post(path, json=body, headers={IDEMPOTENCY: second_key}).status_code == 403
        answered = operator.post(path, json=body, headers={IDEMPOTENCY: second_key})
        assert answered.status_code == 200, answered.text
        assert answered.json()["limits"]["monthly_tokens"] == 123_456


def keyed_http(server: ServerProcess, key: str) -> httpx2.Client:
    return httpx2.Client(
        verify=client_tls(), base_url=server.url, headers={"x-api-key": key}, timeout=30
    )
