"""An agent's skills through the SDK on a real server: references are checked
(unknown ids and versions, Anthropic pre-built skills), and the model is told
about each skill in the system prompt, at the version the agent pins or the
latest one."""

from __future__ import annotations

import uuid
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, ServerProcess
from tests.conftest import make_client
from tests.integration.helpers import message, wait_idle
from tests.integration.skill_files import skill_files

MODEL = "claude-sonnet-4-6"


def _skill(client: anthropic.Anthropic, description: str) -> tuple[str, str]:
    name = f"skill-{uuid.uuid4().hex[:10]}"
    return client.beta.skills.create(files=skill_files(name, description)).id, name


def _refusal(call: Any) -> str:
    with pytest.raises(anthropic.BadRequestError) as caught:
        call()
    return str(caught.value.body["error"]["message"])  # type: ignore[index]


def test_agents_store_custom_skills_with_latest_for_unpinned(client: anthropic.Anthropic) -> None:
    first, _ = _skill(client, "First skill.")
    second, _ = _skill(client, "Second skill.")
    pinned = client.beta.skills.retrieve(second).latest_version_id
    agent = client.beta.agents.create(
        name="a",
        model=MODEL,
        skills=[
            {"type": "custom", "skill_id": first},
            {"type": "custom", "skill_id": second, "version": pinned},
        ],
    )
    assert [(s.skill_id, s.version) for s in agent.skills] == [(first, "latest"), (second, pinned)]
    updated = client.beta.agents.update(agent.id, version=agent.version, skills=[])
    assert updated.skills == []


def test_unknown_and_prebuilt_skills_are_refused_naming_the_field(
    client: anthropic.Anthropic,
) -> None:
    skill, _ = _skill(client, "A skill.")
    create = client.beta.agents.create
    assert _refusal(
        lambda: create(name="a", model=MODEL, skills=[{"type": "custom", "skill_id": "skill_nope"}])
    ).startswith("skills.0.skill_id: no skill 'skill_nope'")
    assert _refusal(
        lambda: create(
            name="a",
            model=MODEL,
            skills=[
                {"type": "custom", "skill_id": skill},
                {"type": "custom", "skill_id": skill, "version": "123"},
            ],
        )
    ).startswith("skills.1.skill_id")
    assert _refusal(
        lambda: create(
            name="a", model=MODEL, skills=[{"type": "custom", "skill_id": skill, "version": "1"}]
        )
    ).startswith("skills.0.version: no skill version '1'")
    assert _refusal(
        lambda: create(name="a", model=MODEL, skills=[{"type": "anthropic", "skill_id": "xlsx"}])
    ).startswith("skills.0.type: stead does not provide Anthropic pre-built skills")
    agent = create(name="a", model=MODEL)
    assert _refusal(
        lambda: client.beta.agents.update(
            agent.id, version=agent.version, skills=[{"type": "custom", "skill_id": "skill_nope"}]
        )
    ).startswith("skills.0.skill_id")
    assert client.beta.agents.retrieve(agent.id).version == agent.version
    environment = client.beta.environments.create(name=f"e-{uuid.uuid4().hex[:8]}")
    overrides = {
        "type": "agent_with_overrides",
        "id": agent.id,
        "skills": [{"type": "custom", "skill_id": "skill_nope"}],
    }
    assert _refusal(
        lambda: client.beta.sessions.create(agent=overrides, environment_id=environment.id)  # type: ignore[arg-type]
    ).startswith("agent.skills.0.skill_id")
    # A deleted skill is unknown too.
    deleted = client.beta.skills.delete(skill)
    assert _refusal(
        lambda: create(name="a", model=MODEL, skills=[{"type": "custom", "skill_id": deleted.id}])
    ).startswith("skills.0.skill_id")


def test_another_workspaces_skill_is_unknown(
    server: ServerProcess, client: anthropic.Anthropic
) -> None:
    other_key = server.create_key(new_workspace=f"other-{uuid.uuid4().hex[:6]}")
    with make_client(server.url, other_key) as theirs:
        skill, _ = _skill(theirs, "Theirs.")
    assert _refusal(
        lambda: client.beta.agents.create(
            name="a", model=MODEL, skills=[{"type": "custom", "skill_id": skill}]
        )
    ).startswith(f"skills.0.skill_id: no skill {skill!r}")


def _system_prompts(fake: FakeModel, marker: str) -> list[str]:
    found = []
    for request in fake.requests:
        blocks = request.body.get("system") or []
        text = "\n".join(b["text"] for b in blocks if isinstance(b, dict))
        if marker in text:
            found.append(text)
    return found


def test_the_model_is_told_each_skill_and_where_to_read_it(
    client: anthropic.Anthropic, fake_model: FakeModel
) -> None:
    marker = uuid.uuid4().hex
    latest_id, latest_name = _skill(client, f"Old description {marker}.")
    pinned_id, pinned_name = _skill(client, f"Pinned description {marker}.")
    pinned = client.beta.skills.retrieve(pinned_id).latest_version_id
    client.beta.skills.versions.create(
        pinned_id, files=skill_files(pinned_name, f"Later description {marker}.")
    )
    agent = client.beta.agents.create(
        name="a",
        model=MODEL,
        system=f"Agent prompt {marker}.",
        skills=[
            {"type": "custom", "skill_id": latest_id},
            {"type": "custom", "skill_id": pinned_id, "version": pinned},
        ],
    )
    environment = client.beta.environments.create(name=f"e-{uuid.uuid4().hex[:8]}")
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    client.beta.skills.versions.create(
        latest_id, files=skill_files(latest_name, f"New description {marker}.")
    )
    client.beta.sessions.events.send(session.id, events=[message("hello")])  # type: ignore[list-item]
    wait_idle(client, session.id)

    (prompt,) = _system_prompts(fake_model, marker)
    assert prompt.startswith(f"Agent prompt {marker}.\n")
    assert f"<name>{latest_name}</name>" in prompt
    assert f"<description>New description {marker}.</description>" in prompt
    assert f"<location>/workspace/skills/{latest_name}/SKILL.md</location>" in prompt
    assert f"<description>Pinned description {marker}.</description>" in prompt
    assert f"<location>/workspace/skills/{pinned_name}/SKILL.md</location>" in prompt
    assert "Old description" not in prompt and "Later description" not in prompt


def test_a_deleted_skill_is_reported_and_left_out(
    client: anthropic.Anthropic, fake_model: FakeModel
) -> None:
    marker = uuid.uuid4().hex
    kept, kept_name = _skill(client, f"Kept {marker}.")
    gone, gone_name = _skill(client, f"Gone {marker}.")
    agent = client.beta.agents.create(
        name="a",
        model=MODEL,
        skills=[{"type": "custom", "skill_id": kept}, {"type": "custom", "skill_id": gone}],
    )
    environment = client.beta.environments.create(name=f"e-{uuid.uuid4().hex[:8]}")
    session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    client.beta.skills.delete(gone)
    client.beta.sessions.events.send(session.id, events=[message("hello")])  # type: ignore[list-item]
    wait_idle(client, session.id)

    (prompt,) = _system_prompts(fake_model, marker)
    assert f"<name>{kept_name}</name>" in prompt and gone_name not in prompt
    errors = [e for e in client.beta.sessions.events.list(session.id) if e.type == "session.error"]
    assert len(errors) == 1
    assert gone in errors[0].error.message  # type: ignore[union-attr]
