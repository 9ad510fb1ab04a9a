"""Session threads through the official SDK (``client.beta.sessions.threads``): a
stead session has its primary thread only, whose agent, status and usage are the
session's and whose events and stream are the session's; it cannot be archived,
and no other thread is found."""

from __future__ import annotations

import anthropic
import pytest

from tests.integration.helpers import message, new_session, wait_idle
from tests.integration.on_each_store import ON_EACH_STORE, client

pytestmark = ON_EACH_STORE
__all__ = ["client"]  # fixtures


def test_a_session_lists_its_primary_thread(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    session = client.beta.sessions.retrieve(session_id)
    (thread,) = client.beta.sessions.threads.list(session_id)
    assert thread.type == "session_thread" and thread.id.startswith("sthr_")
    assert (thread.session_id, thread.parent_thread_id) == (session_id, None)
    assert (thread.status, thread.archived_at, thread.workflow_run_id) == ("idle", None, None)
    assert thread.agent.type == "agent"
    assert (thread.agent.id, thread.agent.version, thread.agent.name) == (
        session.agent.id,
        session.agent.version,
        session.agent.name,
    )
    assert thread.created_at == session.created_at
    retrieved = client.beta.sessions.threads.retrieve(thread.id, session_id=session_id)
    assert retrieved.model_dump(exclude={"stats"}) == thread.model_dump(exclude={"stats"})
    idle = client.beta.sessions.threads.list(session_id, statuses=["idle", "running"])
    assert [t.id for t in idle] == [thread.id]
    assert list(client.beta.sessions.threads.list(session_id, statuses=["terminated"])) == []


def test_the_primary_threads_events_are_the_sessions(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    (thread,) = client.beta.sessions.threads.list(session_id)
    with client.beta.sessions.threads.events.stream(thread.id, session_id=session_id) as stream:
        client.beta.sessions.events.send(session_id, events=[message("hello")])
        streamed = []
        for event in stream:
            streamed.append(event)
            if event.type == "session.status_idle":
                break
    wait_idle(client, session_id)
    listed = client.beta.sessions.threads.events.list(thread.id, session_id=session_id)
    assert [e.id for e in listed] == [e.id for e in client.beta.sessions.events.list(session_id)]
    assert [e.id for e in streamed] == [e.id for e in listed]
    assert [e.type for e in streamed][-1] == "session.status_idle"
    used = client.beta.sessions.threads.retrieve(thread.id, session_id=session_id).usage
    assert used is not None
    assert used.model_dump() == client.beta.sessions.retrieve(session_id).usage.model_dump()
    assert used is not None and used.output_tokens


def test_the_primary_thread_is_not_archived_and_no_other_thread_is_found(
    client: anthropic.Anthropic,
) -> None:
    session_id, other_id = new_session(client), new_session(client)
    (thread,) = client.beta.sessions.threads.list(session_id)
    with pytest.raises(anthropic.BadRequestError, match="primary thread, which cannot be arch"):
        client.beta.sessions.threads.archive(thread.id, session_id=session_id)
    (other,) = client.beta.sessions.threads.list(other_id)
    for missing in (other.id, "sthr_none"):
        with pytest.raises(anthropic.NotFoundError, match="no session thread"):
            client.beta.sessions.threads.retrieve(missing, session_id=session_id)
        with pytest.raises(anthropic.NotFoundError):
            client.beta.sessions.threads.events.list(missing, session_id=session_id)
    with pytest.raises(anthropic.NotFoundError, match="no session"):
        client.beta.sessions.threads.list("sesn_none")
    with pytest.raises(anthropic.BadRequestError, match="page"):
        client.beta.sessions.threads.list(session_id, page="not-a-cursor")
    assert client.beta.sessions.threads.retrieve(thread.id, session_id=session_id).status == "idle"
    archived = client.beta.sessions.archive(session_id).archived_at
    assert archived is not None
    (gone,) = client.beta.sessions.threads.list(session_id)
    assert gone.archived_at == archived  # a thread is archived with its session


def test_an_interrupt_may_name_the_primary_thread(client: anthropic.Anthropic) -> None:
    session_id = new_session(client)
    (thread,) = client.beta.sessions.threads.list(session_id)
    sent = client.beta.sessions.events.send(
        session_id, events=[{"type": "user.interrupt", "session_thread_id": thread.id}]
    )
    assert sent.data[0].type == "user.interrupt"
    with pytest.raises(anthropic.BadRequestError, match=r"events\.0\.session_thread_id"):
        client.beta.sessions.events.send(
            session_id, events=[{"type": "user.interrupt", "session_thread_id": "sthr_none"}]
        )
