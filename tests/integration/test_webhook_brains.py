"""Several ``stead serve`` processes on one PostgreSQL schema share the webhook
outbox: events made through either are delivered once each, in the order they
were committed, whichever process claims them."""

from __future__ import annotations

import base64
import secrets
import time
from pathlib import Path

import httpx2
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls
from tests.conftest import loop_env, make_client
from tests.databases import PostgresRun
from tests.webhook_receiver import HOOKS_HOST, PINNED, Receiver

pytestmark = pytest.mark.postgres
EVENTS = 12


def test_processes_on_one_database_deliver_each_event_once_in_order(
    postgres_run: PostgresRun, tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    schema = postgres_run.new_schema()
    env = loop_env(
        fake_model,
        STEAD_DATABASE_URL=postgres_run.url(schema),
        # One sealing key: every process must open every endpoint's secret.
        STEAD_SECRET_KEY=base64.b64encode(secrets.token_bytes(32)).decode(),
        STEAD_EGRESS_HOSTS=PINNED,
        STEAD_WEBHOOK_POLL_SECONDS="0.02",
    )
    servers = [
        ServerProcess(tmp_path / f"brain-{n}", env=env, forker=forker).start() for n in range(2)
    ]
    try:
        key = next(s.first_key for s in servers if s.first_key)
        with Receiver() as receiver:
            hook = {
                "url": f"http://{HOOKS_HOST}:{receiver.port}/",
                "event_types": ["vault.created"],
            }
            made = httpx2.post(
                f"{servers[0].url}/v1/stead/webhooks",
                json=hook,
                headers={"x-api-key": key},
                timeout=30,
                verify=client_tls(),
            ).json()
            clients = [make_client(s.url, key) for s in servers]
            try:
                vaults = [
                    clients[n % 2].beta.vaults.create(display_name=f"v{n}").id
                    for n in range(EVENTS)
                ]
                arrived = receiver.wait_for(EVENTS)
                events = [
                    clients[0].beta.webhooks.unwrap(r.body, headers=r.headers, key=made["secret"])
                    for r in arrived
                ]
                shown = _settled(servers[1], key, made["id"])
            finally:
                for client in clients:
                    client.close()
    finally:
        for server in servers:
            server.stop()
        postgres_run.drop_schema(schema)
    assert [e.data.id for e in events] == vaults
    assert len({r.headers["webhook-id"] for r in arrived}) == EVENTS
    assert all(len(d["attempts"]) == 1 for d in shown), shown
    assert len(receiver.received) == EVENTS


def _settled(server: ServerProcess, key: str, endpoint_id: str) -> list[dict[str, object]]:
    """The deliveries once none is pending (the answer is recorded after it arrives)."""
    deadline = time.monotonic() + 30
    while True:
        answer = httpx2.get(
            f"{server.url}/v1/stead/webhooks/{endpoint_id}/deliveries?limit=100",
            headers={"x-api-key": key},
            timeout=30,
            verify=client_tls(),
        )
        found: list[dict[str, object]] = answer.json()["data"]
        if len(found) == EVENTS and all(d["state"] == "delivered" for d in found):
            return found
        assert time.monotonic() < deadline, found
        time.sleep(0.02)
