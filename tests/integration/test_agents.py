"""Agents through the official SDK: versions, no-op updates, archive, list paging."""

from __future__ import annotations

import uuid

import anthropic
import pytest

from stead.testing import FakeModel
from tests.integration.helpers import message, wait_idle
from tests.integration.on_each_store import ON_EACH_STORE, client

pytestmark = ON_EACH_STORE
__all__ = ["client"]  # fixtures


TOOLSET = {"type": "agent_toolset_20260401"}


def test_create_retrieve_and_resolved_shape(client: anthropic.Anthropic) -> None:
    agent = client.beta.agents.create(
        name="Coder",
        model="claude-sonnet-4-6",
        system="Be brief.",
        tools=[
            TOOLSET,
            {
                "type": "custom",
                "name": "lookup",
                "description": "Look a thing up",
                "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        ],
        metadata={"team": "infra"},
    )
    assert agent.id.startswith("agent_")
    assert agent.version == 1
    assert agent.model.id == "claude-sonnet-4-6"
    toolset = agent.tools[0]
    assert toolset.type == "agent_toolset_20260401"
    assert toolset.default_config.permission_policy.type == "always_allow"
    assert agent.execution_identity.type == "service_account"
    again = client.beta.agents.retrieve(agent.id)
    assert again.model_dump() == agent.model_dump()


def test_web_tool_configs_come_back_resolved(client: anthropic.Anthropic) -> None:
    """``url_sources`` shorthands come back in the object form the SDK reads."""
    fetch = {
        "name": "web_fetch",
        "allowed_domains": ["docs.example.com"],
        "max_content_tokens": 2000,
        "url_sources": {
            "user_input": "none",
            "client_tool_results": {
                "type": "only",
                "tools": [{"type": "tool_reference", "name": "lookup"}],
            },
        },
    }
    search = {"name": "web_search", "blocked_domains": ["ads.example.com"]}
    lookup = {"type": "custom", "name": "lookup", "description": "d"}
    agent = client.beta.agents.create(
        name="web",
        model="claude-sonnet-4-6",
        tools=[
            {**TOOLSET, "configs": [fetch, search]},
            {**lookup, "input_schema": {"type": "object"}},
        ],  # type: ignore[list-item]
    )
    configs = agent.tools[0].configs  # type: ignore[union-attr]
    sources = configs[0].url_sources  # type: ignore[union-attr]
    assert sources is not None
    assert sources.user_input.type == "none"  # type: ignore[union-attr]
    assert sources.client_tool_results.type == "only"  # type: ignore[union-attr]
    assert sources.server_tool_results is None
    assert configs[0].allowed_domains == ["docs.example.com"]  # type: ignore[union-attr]
    assert configs[1].blocked_domains == ["ads.example.com"]  # type: ignore[union-attr]
    again = client.beta.agents.retrieve(agent.id)
    assert again.model_dump() == agent.model_dump()


def test_every_change_is_a_new_version_and_noops_are_not(client: anthropic.Anthropic) -> None:
    agent = client.beta.agents.create(name="v", model="claude-sonnet-4-6", tools=[TOOLSET])
    same = client.beta.agents.update(agent.id, name="v")
    assert same.version == 1
    v2 = client.beta.agents.update(agent.id, system="new prompt", metadata={"k": "1"})
    assert (v2.version, v2.system, v2.metadata) == (2, "new prompt", {"k": "1"})
    v3 = client.beta.agents.update(agent.id, metadata={"k": None, "j": "2"}, version=2)
    assert (v3.version, v3.metadata) == (3, {"j": "2"})
    assert client.beta.agents.retrieve(agent.id, version=2).system == "new prompt"
    assert client.beta.agents.retrieve(agent.id, version=1).system is None
    versions = [a.version for a in client.beta.agents.versions.list(agent.id)]
    assert versions == [3, 2, 1]
    with pytest.raises(anthropic.ConflictError) as stale:
        client.beta.agents.update(agent.id, name="w", version=1)
    assert stale.value.response.headers["x-should-retry"] == "false"
    assert client.beta.agents.retrieve(agent.id).version == 3
    # "" clears as null does (the SDK's words); clearing what is clear changes nothing.
    v4 = client.beta.agents.update(agent.id, system="", description="")
    assert (v4.version, v4.system, v4.description) == (4, None, None)
    assert client.beta.agents.update(agent.id, system=None, description="").version == 4


def test_archive_hides_from_list_and_blocks_updates(client: anthropic.Anthropic) -> None:
    agent = client.beta.agents.create(name="old", model="claude-sonnet-4-6")
    archived = client.beta.agents.archive(agent.id)
    assert archived.archived_at is not None
    listed = {a.id for a in client.beta.agents.list(limit=100)}
    assert agent.id not in listed
    with_archived = {a.id for a in client.beta.agents.list(limit=100, include_archived=True)}
    assert agent.id in with_archived
    with pytest.raises(anthropic.BadRequestError):
        client.beta.agents.update(agent.id, name="new")


def test_list_pages_through_everything_once(client: anthropic.Anthropic) -> None:
    made = {client.beta.agents.create(name=f"p{i}", model="m").id for i in range(7)}
    seen = [a.id for a in client.beta.agents.list(limit=3)]
    assert len(seen) == len(set(seen))
    assert made <= set(seen)
    first = client.beta.agents.list(limit=3)
    assert len(first.data) == 3 and first.next_page


def test_the_model_settings_reach_the_model_and_effort_outlives_an_update(
    client: anthropic.Anthropic, fake_model: FakeModel
) -> None:
    """Before, effort, speed and inference_geo were stored and echoed but never
    sent; and an update of the model without effort cleared it, where the SDK
    says it is kept."""
    model = {"id": "claude-sonnet-4-6", "effort": "low", "speed": "fast", "inference_geo": "eu"}
    agent = client.beta.agents.create(name="tuned", model=model)  # type: ignore[arg-type]
    env = client.beta.environments.create(name=f"tuned-{uuid.uuid4().hex[:10]}")
    session_id = client.beta.sessions.create(agent=agent.id, environment_id=env.id).id
    client.beta.sessions.events.send(session_id, events=[message("hello")])
    wait_idle(client, session_id)
    sent = [r for r in fake_model.requests if r.body.get("messages")][-1]
    assert sent.body["output_config"] == {"effort": "low"}
    assert (sent.body["speed"], sent.body["inference_geo"]) == ("fast", "eu")
    assert sent.headers["anthropic-beta"] == "fast-mode-2026-02-01"
    updated = client.beta.agents.update(
        agent.id, version=agent.version, model={"id": "claude-sonnet-4-6", "speed": "standard"}
    )
    assert updated.model.effort is not None and updated.model.effort.type == "low"
    assert (updated.model.speed, updated.model.inference_geo) == ("standard", None)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        # Before, accepted; the model API then refused every turn of every session.
        (
            {
                "tools": [
                    {
                        "type": "custom",
                        "name": "t",
                        "description": "d",
                        "input_schema": {"type": "object", "properties": {"a": {"minLength": -1}}},
                    }
                ]
            },
            "tools.0.input_schema.properties.a.minLength: not a JSON Schema",
        ),
        # Before, accepted and never used.
        (
            {"execution_identity": {"type": "aws_role", "role_arn": "arn:aws:iam::1:role/x"}},
            "execution_identity.type: 'aws_role' is not supported",
        ),
    ],
)
def test_what_stead_cannot_honour_is_refused_naming_the_field(
    client: anthropic.Anthropic, fields: dict[str, object], named: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.beta.agents.create(name="x", model="claude-sonnet-4-6", **fields)  # type: ignore[arg-type]
    assert str(refused.value.body["error"]["message"]).startswith(named)  # type: ignore[index]
