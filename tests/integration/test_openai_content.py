"""What a user.message shows a model served through ``STEAD_OPENAI_MODELS``:
its images and documents, as chat completions content parts, not only its text."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, echo
from tests.conftest import loop_env, sdk_of, serving

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGMAAQAABQABpfZFQAAAAABJRU5ErkJggg=="


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(echo) as model:
        yield model


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    env = loop_env(fake, STEAD_OPENAI_MODELS=json.dumps({"local-llama": fake.openai_url}))
    yield from serving(tmp_path_factory.mktemp("openai-content"), env, forker)


def _turn(client: anthropic.Anthropic, content: list[dict[str, Any]]) -> list[Any]:
    agent = client.beta.agents.create(name="o", model="local-llama")
    env = client.beta.environments.create(name=f"o-{uuid.uuid4().hex[:8]}")
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    events = []
    with client.beta.sessions.events.stream(session.id) as stream:
        client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": content}]
        )
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
