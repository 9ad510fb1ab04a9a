"""What a user.message and a tool result show a model served through
``STEAD_OPENAI_MODELS``: their images, documents and search results, as chat
completions content parts, not only their text."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess
from stead.testing.scripts import call_every_tool
from tests.conftest import loop_env, sdk_of, serving

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGMAAQAABQABpfZFQAAAAABJRU5ErkJggg=="


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    # No tools: it echoes; offered a tool, it calls it once, then says done.
    with FakeModel(call_every_tool) as model:
        yield model


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    env = loop_env(fake, STEAD_OPENAI_MODELS=json.dumps({"local-llama": fake.openai_url}))
    yield from serving(tmp_path_factory.mktemp("openai-content"), env, forker)


def _session(client: anthropic.Anthropic, tools: list[Any] | None = None) -> str:
    agent = client.beta.agents.create(name="o", model="local-llama", tools=tools or [])
    env = client.beta.environments.create(name=f"o-{uuid.uuid4().hex[:8]}")
    return client.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def _turn(client: anthropic.Anthropic, content: list[dict[str, Any]]) -> list[Any]:
    return _sent(client, _session(client), {"type": "user.message", "content": content})


def _sent(client: anthropic.Anthropic, session_id: str, event: dict[str, Any]) -> list[Any]:
    """The events of the turn ``event`` starts, up to its idle."""
    events = []
    with client.beta.sessions.events.stream(session_id) as stream:
        client.beta.sessions.events.send(session_id, events=[event])  # type: ignore[list-item]
        for event in stream:
            events.append(event)
            if event.type == "session.status_idle":
                break
    return events


def test_images_and_documents_reach_an_openai_compatible_model(
    served: ServerProcess, fake: FakeModel
) -> None:
    """They were dropped: the model saw the words beside them only, and a
    message of an image alone was no message (its turn failed, upstream 400)."""
    image = {"type": "image", "source": {"type": "base64", "data": PNG, "media_type": "image/png"}}
    linked = {"type": "image", "source": {"type": "url", "url": "https://img.invalid/a.png"}}
    text_doc = {
        "type": "document",
        "source": {"type": "text", "data": "the secret is 42", "media_type": "text/plain"},
        "title": "Notes",
    }
    pdf = {
        "type": "document",
        "source": {"type": "base64", "data": "JVBERi0=", "media_type": "application/pdf"},
    }
    with sdk_of(served) as client:
        alone = _turn(client, [image])
        assert [e.type for e in alone if e.type == "session.error"] == []
        assert alone[-1].stop_reason.type == "end_turn"
        _turn(client, [image, linked, text_doc, pdf, {"type": "text", "text": "what is this?"}])
    sent = [r.body for r in fake.requests if r.path.endswith("/chat/completions")]
    assert sent[0]["messages"][-1] == {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}],
    }
    assert sent[-1]["messages"][-1]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://img.invalid/a.png"}},
        {"type": "text", "text": "Notes\n\nthe secret is 42"},
        {
            "type": "file",
            "file": {
                "filename": "document.pdf",
                "file_data": "data:application/pdf;base64,JVBERi0=",
            },
        },
        {"type": "text", "text": "what is this?"},
    ]


LOOKUP = {
    "type": "custom",
    "name": "lookup",
    "description": "Look something up",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
}


def test_a_tool_results_images_and_search_results_reach_an_openai_compatible_model(
    served: ServerProcess, fake: FakeModel
) -> None:
    """A ``tool`` message takes text only, so a result's image was dropped and the
    model never saw what it asked for; a search result was dropped too. The
    image now follows the results in a user message naming the call."""
    image = {"type": "image", "source": {"type": "base64", "data": PNG, "media_type": "image/png"}}
    found = {
        "type": "search_result",
        "source": "https://docs.invalid/weather",
        "title": "Weather",
        "content": [{"type": "text", "text": "sunny all week"}],
        "citations": {"enabled": False},
    }
    with sdk_of(served) as client:
        session_id = _session(client, [LOOKUP])
        asked = _sent(
            client,
            session_id,
            {"type": "user.message", "content": [{"type": "text", "text": "look"}]},
        )
        use = next(e for e in asked if e.type == "agent.custom_tool_use")
        result = {
            "type": "user.custom_tool_result",
            "custom_tool_use_id": use.id,
            "content": [{"type": "text", "text": "here:"}, image, found],
        }
        answered = _sent(client, session_id, result)
    assert answered[-1].stop_reason.type == "end_turn"
    messages = [r.body for r in fake.requests if r.path.endswith("/chat/completions")][-1][
        "messages"
    ]
    call_id = messages[-3]["tool_calls"][0]["id"]
    assert messages[-2] == {
        "role": "tool",
        "tool_call_id": call_id,
        "content": "here:\n\nWeather (https://docs.invalid/weather)\nsunny all week"
        "\n\n(1 attachment(s) in the next user message)",
    }
    assert messages[-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": f"The result of tool call {call_id} holds:"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    }
