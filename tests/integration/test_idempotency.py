"""``Idempotency-Key`` through the official SDK against a real ``stead serve``,
on SQLite and on PostgreSQL: replays, a reused key, concurrent creates, restarts."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import pytest

from stead.testing import ServerProcess
from tests.conftest import make_client, sdk_of
from tests.databases import BACKENDS

pytestmark = pytest.mark.parametrize(
    "server_on_each_store", BACKENDS, indirect=True, scope="module"
)
TOOLS: Any = [{"type": "agent_toolset_20260401"}]


@pytest.fixture
def client(client_on_each_store: anthropic.Anthropic) -> anthropic.Anthropic:
    return client_on_each_store


def keyed(key: str) -> dict[str, Any]:
    return {"extra_headers": {"Idempotency-Key": key}}


def new_key() -> str:
    return f"k-{uuid.uuid4().hex}"


def create_agent(client: anthropic.Anthropic, name: str, key: str) -> Any:
    raw = client.beta.agents.with_raw_response.create(
        name=name, model="claude-sonnet-4-6", tools=TOOLS, **keyed(key)
    )
    return raw.headers.get("idempotent-replayed"), raw.parse()


def agents_named(client: anthropic.Anthropic, name: str) -> list[str]:
    return [a.id for a in client.beta.agents.list(limit=100) if a.name == name]


def test_a_replay_returns_the_first_answer(client: anthropic.Anthropic) -> None:
    key, name = new_key(), f"a-{uuid.uuid4().hex[:8]}"
    first_replayed, first = create_agent(client, name, key)
    again_replayed, again = create_agent(client, name, key)
    assert (first_replayed, again_replayed) == (None, "true")
    assert again.id == first.id
    assert again.model_dump() == first.model_dump()
    assert agents_named(client, name) == [first.id]


def test_the_same_key_with_another_body_is_a_409(client: anthropic.Anthropic) -> None:
    key = new_key()
    create_agent(client, "first", key)
    with pytest.raises(anthropic.ConflictError) as caught:
        create_agent(client, "second", key)
    assert "Idempotency-Key" in caught.value.message
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


def test_keys_hold_for_other_posts_and_leave_gets_alone(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(name=f"e-{uuid.uuid4().hex[:8]}")
    _, agent = create_agent(client, "poster", new_key())
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    key = new_key()
    events: Any = [{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
    for _ in range(2):
        client.beta.sessions.events.send(session.id, events=events, **keyed(key))
    sent = [e for e in client.beta.sessions.events.list(session.id) if e.type == "user.message"]
    assert len(sent) == 1
    raw = client.beta.agents.with_raw_response.retrieve(agent.id, **keyed(key))
    assert "idempotent-replayed" not in raw.headers
    assert raw.parse().id == agent.id


def test_a_refusal_that_wrote_nothing_settles_its_key_too(client: anthropic.Anthropic) -> None:
    """A route that refuses before any write claims the key once it has
    answered: its refusal is replayed, and a key another body used is a 409."""
    refused = new_key()
    outcomes = []
    for _ in range(2):
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.beta.agents.create(name="", model="claude-sonnet-4-6", **keyed(refused))
        answer = caught.value.response
        outcomes.append((answer.status_code, answer.headers.get("idempotent-replayed")))
    assert outcomes == [(400, None), (400, "true")]
    used = new_key()
    create_agent(client, "first", used)
    with pytest.raises(anthropic.ConflictError) as caught:
        client.beta.agents.create(name="", model="claude-sonnet-4-6", **keyed(used))
    assert "Idempotency-Key" in caught.value.message


def test_concurrent_identical_sends_log_one_message(client: anthropic.Anthropic) -> None:
    env = client.beta.environments.create(name=f"e-{uuid.uuid4().hex[:8]}")
    _, agent = create_agent(client, "sender", new_key())
    session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
    key, start = new_key(), threading.Barrier(4)
    events: Any = [{"type": "user.message", "content": [{"type": "text", "text": "once"}]}]

    def send() -> list[str]:
        start.wait(timeout=30)
        sent = client.beta.sessions.events.send(session.id, events=events, **keyed(key))
        return [event.id for event in sent.data or []]

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: send(), range(4)))
    assert all(answer == answers[0] for answer in answers)
    logged = [
        e.id for e in client.beta.sessions.events.list(session.id) if e.type == "user.message"
    ]
    assert logged == answers[0]


def test_a_bad_key_is_a_400_in_the_envelope(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        create_agent(client, "bad", "x" * 300)
    assert "Idempotency-Key" in caught.value.message


def test_keys_belong_to_a_workspace(
    client: anthropic.Anthropic, server_on_each_store: ServerProcess
) -> None:
    key, name = new_key(), f"w-{uuid.uuid4().hex[:8]}"
    _, first = create_agent(client, name, key)
    other = server_on_each_store.create_key(new_workspace=f"other-{uuid.uuid4().hex[:6]}")
    with make_client(server_on_each_store.url, other) as stranger:
        replayed, theirs = create_agent(stranger, name, key)
    assert (replayed, theirs.id != first.id) == (None, True)


def test_concurrent_identical_creates_make_one_agent(client: anthropic.Anthropic) -> None:
    key, name = new_key(), f"c-{uuid.uuid4().hex[:8]}"
    start = threading.Barrier(4)

    def create() -> str:
        start.wait(timeout=30)
        return str(create_agent(client, name, key)[1].id)

    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda _: create(), range(4)))
    assert len(set(ids)) == 1
    assert agents_named(client, name) == ids[:1]


def test_a_replay_after_a_restart_returns_the_first_answer(
    server_on_each_store: ServerProcess,
) -> None:
    key, name = new_key(), f"r-{uuid.uuid4().hex[:8]}"
    with sdk_of(server_on_each_store) as client:
        _, first = create_agent(client, name, key)
    server_on_each_store.stop()
    server_on_each_store.start()
    with sdk_of(server_on_each_store) as client:
        replayed, again = create_agent(client, name, key)
    assert (replayed, again.id) == ("true", first.id)


def test_a_retried_upload_is_replayed_and_a_large_keyed_one_refused(
    client: anthropic.Anthropic,
) -> None:
    """The SDK draws a new multipart boundary for each attempt; the same upload
    sent again is still the same request."""
    key, name = new_key(), f"u-{uuid.uuid4().hex[:8]}.txt"
    sent = [
        client.beta.files.with_raw_response.upload(
            file=(name, b"quarterly\n", "text/plain"), **keyed(key)
        )
        for _ in range(2)
    ]
    assert [r.headers.get("idempotent-replayed") for r in sent] == [None, "true"]
    first, again = (r.parse() for r in sent)
    assert again.id == first.id
    assert [f.id for f in client.beta.files.list() if f.filename == name] == [first.id]
    big = b"\0" * (32 * 1024**2 + 1)  # past STEAD_MAX_REQUEST_BYTES: cannot be compared
    with pytest.raises(anthropic.APIStatusError) as refused:
        client.beta.files.upload(file=("big.bin", big, "application/octet-stream"), **keyed(key))
    assert refused.value.status_code == 413 and "Idempotency-Key" in refused.value.message


def test_a_key_is_refused_where_the_answer_carries_a_secret(client: anthropic.Anthropic) -> None:
    for path in ("/v1/environments/env_any/keys", "/v1/stead/webhooks"):
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.post(
                path, cast_to=object, body={}, options={"headers": {"Idempotency-Key": "k"}}
            )
        assert "Idempotency-Key: not accepted" in refused.value.message
