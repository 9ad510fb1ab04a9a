"""SIGKILL of ``stead serve`` between an event's commit and its webhook's answer:
the delivery is in the outbox with the event, so the restarted server sends it;
nothing is lost, and a receiver that got it before the kill gets it again with
the same ``webhook-id`` (the at-least-once promise receivers dedupe by)."""

from __future__ import annotations

from pathlib import Path

import anthropic
import httpx2
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls
from tests.conftest import loop_env, make_client
from tests.webhook_receiver import PINNED, Receiver

FAST = {
    "STEAD_EGRESS_HOSTS": PINNED,
    "STEAD_WEBHOOK_POLL_SECONDS": "0.05",
    "STEAD_WEBHOOK_RETRY_BASE_SECONDS": "0.05",
    # A claim's lease is twice this plus a second: the restarted server takes
    # over the killed one's claim after it.
    "STEAD_WEBHOOK_TIMEOUT_SECONDS": "1",
}


@pytest.mark.parametrize(
    ("failpoint", "receipts"), [("webhook.before_send:1", 1), ("webhook.after_send:1", 2)]
)
def test_a_kill_between_commit_and_delivery_loses_nothing(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker, failpoint: str, receipts: int
) -> None:
    data = tmp_path / "data"
    env = loop_env(fake_model, **FAST)
    doomed = ServerProcess(data, env={**env, "STEAD_FAILPOINTS": failpoint}, forker=forker)
    doomed.start()
    key = doomed.first_key
    assert key, doomed.log_text()
    with Receiver() as receiver:
        hook = {"url": receiver.url, "event_types": ["vault.created"]}
        answer = httpx2.post(
            f"{doomed.url}/v1/stead/webhooks",
            json=hook,
            headers={"x-api-key": key},
            timeout=30,
            verify=client_tls(),
        )
        secret = answer.json()["secret"]
        try:
            with make_client(doomed.url, key) as client:
                client.beta.vaults.create(display_name="v")
        except anthropic.APIConnectionError:
            pass  # the courier may kill the server before the answer is written
        assert doomed.wait_exit(30), "the failpoint did not stop the server"
        assert len(receiver.received) == receipts - 1
        restarted = ServerProcess(data, env=env, forker=forker).start()
        try:
            arrived = receiver.wait_for(receipts)
            with make_client(restarted.url, key) as client:
                [vault] = client.beta.vaults.list().data
                events = [
                    client.beta.webhooks.unwrap(r.body, headers=r.headers, key=secret)
                    for r in arrived
                ]
        finally:
            restarted.stop()
    assert [e.data.id for e in events] == [vault.id] * receipts
    assert len({r.headers["webhook-id"] for r in arrived}) == 1
    assert len(receiver.received) == receipts
