"""Sessions through the official SDK: create forms, snapshot, update, list, archive, delete."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import anthropic
import pytest
from anthropic.types.beta import BetaEnvironment, BetaManagedAgentsAgent

from tests.integration.on_each_store import ON_EACH_STORE, client

pytestmark = ON_EACH_STORE
__all__ = ["client"]  # fixtures


@pytest.fixture
def agent(client: anthropic.Anthropic) -> BetaManagedAgentsAgent:
    return client.beta.agents.create(
        name="worker",
        model="claude-sonnet-4-6",
        system="v1 prompt",
        tools=[{"type": "agent_toolset_20260401"}],
    )


@pytest.fixture
def environment(client: anthropic.Anthropic) -> BetaEnvironment:
    return client.beta.environments.create(name=f"s-{uuid.uuid4().hex[:8]}")


def test_create_pins_a_snapshot_of_the_agent(
    client: anthropic.Anthropic, agent: BetaManagedAgentsAgent, environment: BetaEnvironment
) -> None:
    session = client.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, title="first", metadata={"k": "v"}
    )
    assert session.id.startswith("sesn_")
    assert session.status == "idle"
    assert (session.agent.id, session.agent.version) == (agent.id, 1)
    assert session.agent.system == "v1 prompt"
    assert (session.title, session.metadata, session.vault_ids) == ("first", {"k": "v"}, [])
    client.beta.agents.update(agent.id, system="v2 prompt")
    assert client.beta.sessions.retrieve(session.id).agent.system == "v1 prompt"
    pinned = client.beta.sessions.create(
        agent={"type": "agent", "id": agent.id, "version": 1}, environment_id=environment.id
    )
    assert pinned.agent.version == 1
    latest = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    assert (latest.agent.version, latest.agent.system) == (2, "v2 prompt")
    overridden = client.beta.sessions.create(
        agent={"type": "agent_with_overrides", "id": agent.id, "system": "override", "model": "m2"},
        environment_id=environment.id,
    )
    assert (overridden.agent.system, overridden.agent.model.id) == ("override", "m2")
    # The override's fields are checked as the agent's are, and named as in the body.
    for override, named in (
        ({"system": "s" * 100_001}, "agent.system: "),
        ({"model": ""}, "agent.model.id: "),
    ):
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.beta.sessions.create(
                agent={"type": "agent_with_overrides", "id": agent.id, **override},  # type: ignore[typeddict-item]
                environment_id=environment.id,
            )
        assert str(refused.value.body["error"]["message"]).startswith(named)  # type: ignore[index]


def test_initial_events_are_logged_with_the_session(
    client: anthropic.Anthropic, agent: BetaManagedAgentsAgent, environment: BetaEnvironment
) -> None:
    session = client.beta.sessions.create(
        agent=agent.id,
        environment_id=environment.id,
        initial_events=[
            {"type": "user.message", "content": [{"type": "text", "text": "one"}]},
            {"type": "user.message", "content": [{"type": "text", "text": "two"}]},
        ],
    )
    listed = client.beta.sessions.events.list(session.id, types=["user.message"])
    texts = [e.content[0].text for e in listed]
    assert texts == ["one", "two"]


def test_update_emits_session_updated(
    client: anthropic.Anthropic, agent: BetaManagedAgentsAgent, environment: BetaEnvironment
) -> None:
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    same = client.beta.sessions.update(session.id, title=None)
    assert same.title is None
    updated = client.beta.sessions.update(
        session.id,
        title="renamed",
        metadata={"a": "1"},
        agent={"tools": [{"type": "agent_toolset_20260401", "default_config": {"enabled": False}}]},
    )
    assert updated.title == "renamed" and updated.metadata == {"a": "1"}
    assert updated.agent.tools[0].default_config.enabled is False
    logged = list(client.beta.sessions.events.list(session.id, types=["session.updated"]))
    assert len(logged) == 1
    event = logged[0]
    assert event.title == "renamed" and event.metadata == {"a": "1"}
    assert event.agent is not None and event.agent.tools[0].default_config.enabled is False
    with pytest.raises(anthropic.BadRequestError):
        client.beta.sessions.update(session.id, vault_ids=["vlt_x"])


def test_list_filters_order_and_both_directions(
    client: anthropic.Anthropic, agent: BetaManagedAgentsAgent, environment: BetaEnvironment
) -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    made = [
        client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id
        for _ in range(5)
    ]
    ours = list(client.beta.sessions.list(agent_id=agent.id, created_at_gte=before, order="asc"))
    assert [s.id for s in ours] == made
    newest_first = [s.id for s in client.beta.sessions.list(agent_id=agent.id, limit=2)]
    assert newest_first == list(reversed(made))
    page = client.beta.sessions.list(agent_id=agent.id, limit=2, order="asc")
    second = client.beta.sessions.list(agent_id=agent.id, limit=2, order="asc", page=page.next_page)
    assert [s.id for s in second.data] == made[2:4]
    back = client.beta.sessions.list(agent_id=agent.id, limit=2, order="asc", page=second.prev_page)
    assert [s.id for s in back.data] == made[0:2]
    idle = {s.id for s in client.beta.sessions.list(agent_id=agent.id, statuses=["idle"])}
    assert idle == set(made)
    assert list(client.beta.sessions.list(agent_id=agent.id, statuses=["running"])) == []
    assert list(client.beta.sessions.list(agent_id=agent.id, agent_version=9)) == []
    # Without the agent's id, the version filters nothing (as the SDK documents).
    unfiltered = client.beta.sessions.list(agent_version=9, created_at_gte=before, order="asc")
    assert [s.id for s in unfiltered if s.id in made] == made


def test_archive_then_delete(
    client: anthropic.Anthropic, agent: BetaManagedAgentsAgent, environment: BetaEnvironment
) -> None:
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    archived = client.beta.sessions.archive(session.id)
    assert archived.archived_at is not None
    assert session.id not in {s.id for s in client.beta.sessions.list(agent_id=agent.id)}
    listed = client.beta.sessions.list(agent_id=agent.id, include_archived=True)
    assert session.id in {s.id for s in listed}
    with pytest.raises(anthropic.ConflictError) as refused:
        client.beta.sessions.events.send(
            session.id,
            events=[{"type": "user.message", "content": [{"type": "text", "text": "x"}]}],
        )
    assert refused.value.response.headers["x-should-retry"] == "false"
    deleted = client.beta.sessions.delete(session.id)
    assert (deleted.id, deleted.type) == (session.id, "session_deleted")
    with pytest.raises(anthropic.NotFoundError):
        client.beta.sessions.retrieve(session.id)


def test_archived_agent_cannot_start_sessions(
    client: anthropic.Anthropic, agent: BetaManagedAgentsAgent, environment: BetaEnvironment
) -> None:
    client.beta.agents.archive(agent.id)
    with pytest.raises(anthropic.BadRequestError):
        client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    with pytest.raises(anthropic.NotFoundError):
        client.beta.sessions.create(agent="agent_doesnotexist", environment_id=environment.id)
