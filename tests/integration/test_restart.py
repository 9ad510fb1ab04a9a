"""Durability: every acknowledged event survives a SIGKILL of the server, on SQLite
and on PostgreSQL."""

from __future__ import annotations

import threading

import anthropic
import httpx2
import pytest

from stead.testing import ServerProcess, client_tls
from tests.conftest import make_client
from tests.databases import BACKENDS
from tests.integration.helpers import message, new_session, wait_idle

SENDERS = 4
pytestmark = pytest.mark.parametrize("fresh_server", BACKENDS, indirect=True)


def test_acknowledged_events_survive_sigkill(fresh_server: ServerProcess) -> None:
    key = fresh_server.first_key
    assert key
    with make_client(fresh_server.url, key) as client:
        session_id = new_session(client)
    acknowledged: list[str] = []
    lock = threading.Lock()
    killed = threading.Event()

    def send(worker: int) -> None:
        with httpx2.Client(verify=client_tls(), headers={"x-api-key": key}, timeout=10) as http:
            for i in range(10_000):
                try:
                    response = http.post(
                        f"{fresh_server.url}/v1/sessions/{session_id}/events",
                        json={"events": [message(f"{worker}-{i}")]},
                    )
                except httpx2.TransportError:
                    return
                if response.status_code != 200:
                    return
                with lock:
                    acknowledged.append(response.json()["data"][0]["id"])
                    if len(acknowledged) >= 300 and not killed.is_set():
                        killed.set()
                        fresh_server.kill()

    workers = [threading.Thread(target=send, args=(w,)) for w in range(SENDERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert killed.is_set()
    fresh_server.start()
    with make_client(fresh_server.url, key) as client:
        wait_idle(client, session_id, timeout=60)
        listed = client.beta.sessions.events.list(session_id, types=["user.message"])
        stored = [e.id for e in listed]
        assert all(e.processed_at is not None for e in listed)
    missing = set(acknowledged) - set(stored)
    assert not missing, f"{len(missing)} acknowledged events lost"
    assert len(stored) == len(set(stored))
    print(f"restart: {len(acknowledged)} acknowledged before SIGKILL, {len(stored)} stored")


def test_restart_keeps_resources(fresh_server: ServerProcess) -> None:
    key = fresh_server.first_key
    assert key
    with make_client(fresh_server.url, key) as client:
        agent = client.beta.agents.create(name="kept", model="claude-sonnet-4-6")
        client.beta.agents.update(agent.id, system="v2")
    fresh_server.kill()
    fresh_server.start()
    with make_client(fresh_server.url, key) as client:
        again = client.beta.agents.retrieve(agent.id)
        assert (again.version, again.system) == (2, "v2")
        with pytest.raises(anthropic.NotFoundError):
            client.beta.agents.retrieve("agent_missing")
