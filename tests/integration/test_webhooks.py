"""Webhooks through a real ``stead serve`` (SQLite and PostgreSQL) to a real HTTP
receiver on loopback: registration through the admin route, delivery from the
outbox, signatures the SDK's ``beta.webhooks.unwrap`` verifies, retries in order
after the receiver was down, and the egress rules at registration."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest
import standardwebhooks

from stead.testing import ServerProcess, client_tls
from stead.testing.server import free_port
from tests.conftest import make_client
from tests.databases import BACKENDS
from tests.integration.helpers import message, wait_idle
from tests.webhook_receiver import HOOKS_HOST, PINNED, Receiver

pytestmark = pytest.mark.parametrize(
    "server_on_each_store", BACKENDS, indirect=True, scope="module"
)
SERVER_ENV = {
    "STEAD_EGRESS_HOSTS": PINNED,
    "STEAD_WEBHOOK_POLL_SECONDS": "0.05",
    "STEAD_WEBHOOK_RETRY_BASE_SECONDS": "0.05",
    "STEAD_WEBHOOK_RETRY_MAX_SECONDS": "0.2",
    "STEAD_WEBHOOK_TIMEOUT_SECONDS": "5",
}
Json = dict[str, Any]


@pytest.fixture
def client(client_on_each_store: anthropic.Anthropic) -> anthropic.Anthropic:
    return client_on_each_store


class Admin:
    """The ``/v1/stead/webhooks`` routes, as one workspace's key calls them."""

    def __init__(self, server: ServerProcess, key: str) -> None:
        self.key = key
        self.http = httpx2.Client(
            verify=client_tls(), base_url=server.url, headers={"x-api-key": key}, timeout=30
        )

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str = "", body: Json | None = None) -> httpx2.Response:
        return self.http.request(method, f"/v1/stead/webhooks{path}", json=body)

    def create(self, url: str, event_types: list[str]) -> Json:
        answer = self.call("POST", body={"url": url, "event_types": event_types})
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    def settled(self, endpoint_id: str, count: int, timeout: float = 30.0) -> list[Json]:
        """The endpoint's deliveries once ``count`` are there and none is pending
        (the receiver answers before stead records the answer)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.deliveries(endpoint_id)
            if len(found) >= count and all(d["state"] != "pending" for d in found):
                return found
            assert time.monotonic() < deadline, found
            time.sleep(0.02)

    def deliveries(self, endpoint_id: str) -> list[Json]:
        answer = self.call("GET", f"/{endpoint_id}/deliveries")
        assert answer.status_code == 200, answer.text
        return list(answer.json()["data"])


@pytest.fixture
def admin(server_on_each_store: ServerProcess) -> Iterator[Admin]:
    """A new workspace per test: its endpoints see only its own events."""
    opened = Admin(server_on_each_store, server_on_each_store.create_key(new_workspace="hooks"))
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def refused(server_on_each_store: ServerProcess) -> Iterator[Admin]:
    """A workspace where every registration is refused: it never has an endpoint."""
    opened = Admin(server_on_each_store, server_on_each_store.create_key(new_workspace="no"))
    yield opened
    opened.close()


def workspace_client(server: ServerProcess, admin: Admin) -> anthropic.Anthropic:
    return make_client(server.url, admin.key)


def verified(client: anthropic.Anthropic, received: Any, secret: str) -> Any:
    return client.beta.webhooks.unwrap(received.body, headers=received.headers, key=secret)


def test_each_subscribed_event_arrives_once_signed_for_the_sdk(
    server_on_each_store: ServerProcess, admin: Admin
) -> None:
    server = server_on_each_store
    with Receiver() as receiver, workspace_client(server, admin) as client:
        wanted = [
            "session.created",
            "session.status_run_started",
            "session.status_idled",
            "session.status_terminated",
        ]
        endpoint = admin.create(f"http://{HOOKS_HOST}:{receiver.port}/hook", wanted)
        assert endpoint["secret"].startswith("whsec_")
        assert "secret" not in admin.call("GET", f"/{endpoint['id']}").json()
        agent = client.beta.agents.create(name="a", model="claude-sonnet-4-6")  # not subscribed
        environment = client.beta.environments.create(name="e")
        session = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
        client.beta.sessions.events.send(session.id, events=[message("hello")])  # type: ignore[list-item]
        wait_idle(client, session.id)
        ended = admin.http.post(f"/v1/sessions/{session.id}/terminate")
        assert ended.status_code == 200, ended.text
        arrived = receiver.wait_for(4)
        events = [verified(client, r, endpoint["secret"]) for r in arrived]
        assert [e.data.type for e in events] == wanted
        assert {e.data.id for e in events} == {session.id}
        assert len({r.headers["webhook-id"] for r in arrived}) == 4
        with pytest.raises(standardwebhooks.WebhookVerificationError):
            verified(client, arrived[0], "whsec_" + "A" * 44)
        shown = admin.settled(endpoint["id"], 4)
        assert [d["event_type"] for d in reversed(shown)] == wanted
        assert all(d["state"] == "delivered" and len(d["attempts"]) == 1 for d in shown)
        assert len(receiver.received) == 4  # every delivery recorded as delivered, none sent twice


def test_a_receiver_that_is_down_gets_the_events_later_in_order(
    server_on_each_store: ServerProcess, admin: Admin
) -> None:
    server = server_on_each_store
    port = free_port()
    endpoint = admin.create(f"http://{HOOKS_HOST}:{port}/hook", ["environment.created"])
    with workspace_client(server, admin) as client:
        made = [client.beta.environments.create(name=f"e{n}").id for n in range(3)]
        while not any(len(d["attempts"]) >= 2 for d in admin.deliveries(endpoint["id"])):
            pass  # retried while nothing listens (bounded by the test's timeout)
        failed = admin.deliveries(endpoint["id"])
        assert all(d["state"] == "pending" for d in failed)
        assert any(a["error"] and a["status_code"] is None for d in failed for a in d["attempts"])
        with Receiver(port) as receiver:
            arrived = receiver.wait_for(3)
            events = [verified(client, r, endpoint["secret"]) for r in arrived]
    assert [e.data.id for e in events] == made
    assert all(e.data.type == "environment.created" for e in events)


def test_a_rotated_secret_signs_the_next_deliveries(
    server_on_each_store: ServerProcess, admin: Admin
) -> None:
    with Receiver() as receiver, workspace_client(server_on_each_store, admin) as client:
        endpoint = admin.create(f"http://{HOOKS_HOST}:{receiver.port}/", ["vault.created"])
        rotated = admin.call("POST", f"/{endpoint['id']}/rotate_secret").json()
        assert rotated["secret"] != endpoint["secret"]
        client.beta.vaults.create(display_name="v")
        [received] = receiver.wait_for(1)
        assert verified(client, received, rotated["secret"]).data.type == "vault.created"
        with pytest.raises(standardwebhooks.WebhookVerificationError):
            verified(client, received, endpoint["secret"])
    log = server_on_each_store.log_text()
    assert endpoint["secret"] not in log and rotated["secret"] not in log


def test_a_disabled_endpoint_holds_its_deliveries_until_enabled(
    server_on_each_store: ServerProcess, admin: Admin
) -> None:
    with Receiver() as receiver, workspace_client(server_on_each_store, admin) as client:
        endpoint = admin.create(f"http://{HOOKS_HOST}:{receiver.port}/", ["agent.created"])
        agent = client.beta.agents.create(name="first", model="claude-sonnet-4-6")
        receiver.wait_for(1)
        off = admin.call("POST", f"/{endpoint['id']}", {"status": "disabled"})
        assert off.json()["status"] == "disabled"
        client.beta.agents.create(name="unheard", model="claude-sonnet-4-6")
        assert admin.call("POST", f"/{endpoint['id']}", {"status": "enabled"}).status_code == 200
        later = client.beta.agents.create(name="second", model="claude-sonnet-4-6")
        first, second = receiver.wait_for(2)
        assert [verified(client, r, endpoint["secret"]).data.id for r in (first, second)] == [
            agent.id,
            later.id,
        ]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"url": "https://example.com/", "event_types": ["session.bogus"]}, "session.bogus"),
        ({"url": "https://example.com/", "event_types": []}, "event_types"),
        ({"url": "ftp://example.com/", "event_types": ["session.created"]}, "url"),
        ({"url": "https://example.com/", "event_types": ["session.created"], "x": 1}, "x"),
        ({"event_types": ["session.created"]}, "url"),
        # Loopback and private addresses need the operator's pin (STEAD_EGRESS_HOSTS).
        ({"url": "https://127.0.0.1:9/", "event_types": ["session.created"]}, "127.0.0.1"),
        ({"url": "https://localhost/", "event_types": ["session.created"]}, "localhost"),
        ({"url": "https://10.1.2.3/", "event_types": ["session.created"]}, "private"),
        ({"url": "http://example.com/", "event_types": ["session.created"]}, "STEAD_EGRESS_HOSTS"),
    ],
)
def test_bad_registrations_are_a_400_naming_the_field(
    refused: Admin, body: Json, named: str
) -> None:
    answer = refused.call("POST", body=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert named in error["message"]
    assert refused.call("GET").json()["data"] == []  # nothing stored


def test_an_idempotency_key_is_refused_where_answers_carry_a_secret(refused: Admin) -> None:
    hook = {"url": "https://example.com/", "event_types": ["session.created"]}
    answer = refused.http.post("/v1/stead/webhooks", json=hook, headers={"Idempotency-Key": "k"})
    assert answer.status_code == 400
    assert "Idempotency-Key" in answer.json()["error"]["message"]
    assert refused.call("GET").json()["data"] == []


def test_endpoints_belong_to_their_workspace(
    server_on_each_store: ServerProcess, admin: Admin
) -> None:
    endpoint = admin.create(f"http://{HOOKS_HOST}:9/", ["session.created"])
    other = Admin(server_on_each_store, str(server_on_each_store.first_key))
    try:
        assert other.call("GET", f"/{endpoint['id']}").status_code == 404
        assert other.call("GET").json()["data"] == []
    finally:
        other.close()
    assert admin.call("DELETE", f"/{endpoint['id']}").json()["type"] == "webhook_endpoint_deleted"
    assert admin.call("GET", f"/{endpoint['id']}").status_code == 404
