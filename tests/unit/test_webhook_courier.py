"""The webhook courier against real receivers on loopback and a real store: a
slow receiver holds up only its own endpoint's deliveries, and an endpoint
whose URL delivery cannot parse fails its attempts without ending the courier."""

from __future__ import annotations

import json
from typing import Any, cast

import anyio
import pytest

from stead.egress_policy import UpstreamTls
from stead.runtime import WebhookEgress
from stead.runtime.webhook_signing import new_secret, seal_secret
from stead.runtime.webhooks import CourierTerms, WebhookCourier
from stead.store import DatabaseBusy, RetryTerms, SqlStore
from stead.vault import SecretBox
from stead.vault.keys import new_key
from tests.webhook_receiver import HOOKS_HOST, Receiver

pytestmark = pytest.mark.anyio
RETRY = RetryTerms(base_seconds=60.0, max_seconds=600.0, give_up_seconds=3600.0, keep_seconds=60.0)
WAIT = 30.0


def courier(store: SqlStore, box: SecretBox) -> WebhookCourier:
    egress = WebhookEgress(
        pinned={HOOKS_HOST: "127.0.0.1"}, tls=UpstreamTls(None), timeout_seconds=WAIT
    )
    return WebhookCourier(store, box, egress, CourierTerms(poll_seconds=0.05, retry=RETRY))


async def endpoint(store: SqlStore, box: SecretBox, workspace_id: str, name: str, url: str) -> None:
    sealed = seal_secret(box, f"whk_{name}", new_secret())
    fields = {"url": url, "event_types": ["environment.created"]}
    await store.create_webhook_endpoint(workspace_id, f"whk_{name}", fields, sealed)


async def environments(store: SqlStore, workspace_id: str, count: int) -> list[str]:
    made = []
    for n in range(count):
        made.append((await store.create_environment(workspace_id, f"e{n}", None, {}, {}, None)).id)
    return made


def subjects(receiver: Receiver) -> list[str]:
    return [json.loads(r.body)["data"]["id"] for r in receiver.received]


async def test_a_slow_receiver_holds_up_only_its_own_endpoint(store: SqlStore) -> None:
    box = SecretBox(new_key())
    workspace = await store.create_workspace("w")
    with Receiver() as slow, Receiver() as fast:
        await endpoint(store, box, workspace.id, "slow", slow.url)
        await endpoint(store, box, workspace.id, "fast", fast.url)
        made = await environments(store, workspace.id, 3)
        slow.answering.clear()
        async with anyio.create_task_group() as group:
            group.start_soon(courier(store, box).deliver_due)
            # All of the fast endpoint's deliveries go while the slow one's
            # first is still unanswered.
            await anyio.to_thread.run_sync(fast.wait_for, 3, WAIT)
            assert len(slow.received) == 1
            slow.answering.set()
        assert subjects(fast) == subjects(slow) == made  # each endpoint's in order


async def test_a_url_delivery_cannot_parse_fails_its_attempts_and_nothing_else(
    store: SqlStore,
) -> None:
    """Registration refuses such a URL now; one stored before it did must not
    end the courier, which would stop every endpoint's deliveries."""
    box = SecretBox(new_key())
    workspace = await store.create_workspace("w")
    with Receiver() as fine:
        await endpoint(store, box, workspace.id, "bad", f"http://{HOOKS_HOST}:1/a\nb")
        await endpoint(store, box, workspace.id, "fine", fine.url)
        made = await environments(store, workspace.id, 1)
        assert await courier(store, box).deliver_due() == 2
        assert subjects(fine) == made
    [tried] = [d for d in await store.list_webhook_deliveries(None, "whk_bad", 10) if d.attempts]
    assert tried.state == "pending"
    [attempt] = tried.tries
    assert attempt.status_code is None and "InvalidURL" in (attempt.error or "")


class BusyOnce:
    """The store, whose ``webhook_deliveries_due`` is busy once, on its second call."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store
        self._calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def webhook_deliveries_due(self) -> bool:
        self._calls += 1
        if self._calls == 2:
            raise DatabaseBusy("the database is away for a moment")
        return await self._store.webhook_deliveries_due()


async def test_a_busy_database_while_deliveries_are_under_way_lets_them_finish(
    store: SqlStore,
) -> None:
    """Before, the error cancelled the delivery under way (sent again once its
    claim ran out) and broke the stream it reports on, ending the courier."""
    box = SecretBox(new_key())
    workspace = await store.create_workspace("w")
    with Receiver() as slow:
        await endpoint(store, box, workspace.id, "slow", slow.url)
        made = await environments(store, workspace.id, 2)
        slow.answering.clear()
        busy = BusyOnce(store)
        async with anyio.create_task_group() as group:
            group.start_soon(courier(cast(SqlStore, busy), box).deliver_due)
            await anyio.to_thread.run_sync(slow.wait_for, 1, WAIT)
            await anyio.sleep(0.2)  # the courier polls meanwhile, and is told the database is busy
            slow.answering.set()
        assert subjects(slow) == made  # each once, in order
    listed = await store.list_webhook_deliveries(None, "whk_slow", 10)
    assert sorted(d.state for d in listed) == ["delivered", "delivered"]
