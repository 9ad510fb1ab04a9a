"""The webhook outbox on both backends: deliveries written with their event (and
not for a refused write), each endpoint's oldest pending delivery claimed first
and alone, concurrent claims never sharing one, leases, backoff and giving up."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from datetime import timedelta

import anyio
import pytest

from stead.store import (
    AttemptResult,
    Conflict,
    DueDelivery,
    NewEvent,
    PageRequest,
    RetryTerms,
    SqlStore,
)
from stead.store._webhooks import MAX_ENDPOINTS
from tests.databases import STORES
from tests.unit.conftest import new_session, user_message

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", STORES, indirect=True)]
LEASE = 60.0
RETRY = RetryTerms(base_seconds=60.0, max_seconds=600.0, give_up_seconds=3600.0, keep_seconds=60.0)
OK = AttemptResult(204, None)
DOWN = AttemptResult(None, "ConnectError: refused")
SEALED = b"sealed"  # the store never opens it


async def _endpoint(store: SqlStore, workspace_id: str, name: str, *types: str) -> str:
    fields = {"url": f"https://{name}.example/", "event_types": list(types)}
    endpoint = await store.create_webhook_endpoint(workspace_id, f"whk_{name}", fields, SEALED)
    return endpoint.id


async def _environment(store: SqlStore, workspace_id: str, name: str) -> str:
    return (await store.create_environment(workspace_id, name, None, {}, {}, None)).id


def _subject(delivery: DueDelivery) -> str:
    return str(json.loads(delivery.payload)["data"]["id"])


async def _delivered(store: SqlStore) -> list[tuple[str, str]]:
    """(event type, subject id) of every delivery, as a courier whose receiver
    always answers 2xx sends them."""
    sent = []
    while batch := await store.claim_webhook_deliveries(16, LEASE):
        for delivery in batch:
            sent.append((json.loads(delivery.payload)["data"]["type"], _subject(delivery)))
            await store.finish_webhook_delivery(delivery, OK, RETRY)
    return sent


async def test_an_event_brings_its_deliveries_and_a_refused_write_none(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    elsewhere = await store.create_workspace("o")
    await _endpoint(store, workspace.id, "a", "environment.created")
    await _endpoint(store, workspace.id, "b", "environment.deleted")
    await _endpoint(store, elsewhere.id, "c", "environment.created")
    made = await _environment(store, workspace.id, "e")
    with pytest.raises(Conflict):
        await _environment(store, workspace.id, "e")  # the name is taken
    [due] = await store.claim_webhook_deliveries(16, LEASE)
    assert (due.endpoint_id, _subject(due)) == ("whk_a", made)
    payload = json.loads(due.payload)
    assert payload["type"] == "event"
    assert payload["data"] == {
        "id": made,
        "type": "environment.created",
        "workspace_id": workspace.id,
        "organization_id": workspace.id,
    }


async def test_each_endpoint_gets_its_oldest_pending_delivery_first_and_alone(
    store: SqlStore,
) -> None:
    workspace = await store.create_workspace("w")
    await _endpoint(store, workspace.id, "a", "environment.created")
    made = [await _environment(store, workspace.id, f"e{n}") for n in range(3)]
    first = await store.claim_webhook_deliveries(16, LEASE)
    assert [_subject(d) for d in first] == made[:1]
    assert await store.claim_webhook_deliveries(16, LEASE) == []  # the first is out
    await store.finish_webhook_delivery(first[0], DOWN, RETRY)
    assert await store.claim_webhook_deliveries(16, LEASE) == []  # it waits its backoff
    assert not await store.webhook_deliveries_due()
    listed = await store.list_webhook_deliveries(workspace.id, "whk_a", 10)
    [shown] = [d for d in listed if d.attempts]
    assert (shown.state, [(t.status_code, t.error) for t in shown.tries]) == (
        "pending",
        [(None, "ConnectError: refused")],
    )


async def test_a_delivered_one_lets_the_next_go_and_an_expired_claim_is_taken_over(
    store: SqlStore,
) -> None:
    workspace = await store.create_workspace("w")
    await _endpoint(store, workspace.id, "a", "environment.created")
    made = [await _environment(store, workspace.id, f"e{n}") for n in range(2)]
    [lapsed] = await store.claim_webhook_deliveries(16, 0.0)  # its process "died"
    [again] = await store.claim_webhook_deliveries(16, LEASE)
    assert (again.id, again.attempt) == (lapsed.id, 2)
    await store.finish_webhook_delivery(lapsed, DOWN, RETRY)  # too late: only recorded
    await store.finish_webhook_delivery(again, OK, RETRY)
    [following] = await store.claim_webhook_deliveries(16, LEASE)
    assert _subject(following) == made[1]
    [done] = [d for d in await store.list_webhook_deliveries(None, "whk_a", 10) if d.id == again.id]
    assert done.state == "delivered"
    assert [(t.attempt, t.status_code) for t in done.tries] == [(1, None), (2, 204)]


async def test_a_delivery_failing_past_the_day_is_given_up(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    await _endpoint(store, workspace.id, "a", "environment.created")
    await _environment(store, workspace.id, "e")
    [due] = await store.claim_webhook_deliveries(16, LEASE)
    gone = RetryTerms(base_seconds=1.0, max_seconds=1.0, give_up_seconds=0.0, keep_seconds=60.0)
    await store.finish_webhook_delivery(due, DOWN, gone)
    [failed] = await store.list_webhook_deliveries(workspace.id, "whk_a", 10)
    assert failed.state == "failed" and failed.finished_at is not None
    assert not await store.webhook_deliveries_due()


async def test_a_delivery_failing_its_thousandth_time_waits_the_maximum(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    await _endpoint(store, workspace.id, "a", "environment.created")
    await _environment(store, workspace.id, "e")
    [due] = await store.claim_webhook_deliveries(16, LEASE)
    # Short waits reach the 1,025th attempt within hours; the power overflowed.
    await store.finish_webhook_delivery(dataclasses.replace(due, attempt=1100), DOWN, RETRY)
    [held] = await store.list_webhook_deliveries(workspace.id, "whk_a", 10)
    assert held.state == "pending" and [t.attempt for t in held.tries] == [1100]
    assert held.next_attempt_at - held.tries[0].at == timedelta(seconds=RETRY.max_seconds)


async def test_concurrent_claims_never_share_a_delivery(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")
    for n in range(8):
        await _endpoint(store, workspace.id, f"h{n}", "environment.created")
    await _environment(store, workspace.id, "e")
    claimed: list[str] = []

    async def claim() -> None:
        claimed.extend(d.id for d in await store.claim_webhook_deliveries(1, LEASE))

    async with anyio.create_task_group() as group:
        for _ in range(10):
            group.start_soon(claim)
    assert len(claimed) == 8 and len(set(claimed)) == 8


async def test_a_session_going_idle_raises_its_webhook_events(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    await _endpoint(
        store,
        workspace_id,
        "a",
        "session.status_idled",
        "session.requires_action",
        "session.budget_reached",
    )
    stops = ("end_turn", "requires_action", "budget_reached")
    for n, stop in enumerate(stops):
        body = {"stop_reason": {"type": stop}}
        await store.append_events(session_id, [NewEvent(f"sevt_{n}", "session.status_idle", body)])
    await store.append_events(session_id, [user_message("sevt_u")])  # raises none
    raised = [
        "session.status_idled",
        "session.status_idled",
        "session.requires_action",
        "session.status_idled",
        "session.budget_reached",
    ]
    assert await _delivered(store) == [(kind, session_id) for kind in raised]


async def test_resource_changes_raise_their_events_and_no_ops_none(store: SqlStore) -> None:
    workspace_id, session_id = await new_session(store)
    types = ("session.archived", "environment.updated", "environment.deleted", "agent.updated")
    await _endpoint(store, workspace_id, "a", *types)
    env = await _environment(store, workspace_id, "spare")
    await store.archive_session(workspace_id, session_id)
    await store.archive_session(workspace_id, session_id)  # already archived: no event
    await store.update_environment(workspace_id, env, lambda e: {"description": "d"})
    await store.update_environment(workspace_id, env, lambda e: {"description": "d"})  # no-op
    await store.delete_environment(workspace_id, env)
    [agent] = (
        await store.list_agents(workspace_id, PageRequest(10, "asc"), False, None, None)
    ).items
    await store.update_agent(workspace_id, agent.id, None, lambda d: {**d, "name": "renamed"})
    assert await _delivered(store) == [
        ("session.archived", session_id),
        ("environment.updated", env),
        ("environment.deleted", env),
        ("agent.updated", agent.id),
    ]


async def test_a_workspace_holds_a_bounded_number_of_endpoints(store: SqlStore) -> None:
    workspace = await store.create_workspace("w")

    async def add(n: int) -> None:
        with contextlib.suppress(Conflict):
            await _endpoint(store, workspace.id, f"h{n}", "agent.created")

    async with anyio.create_task_group() as group:
        for n in range(MAX_ENDPOINTS + 4):
            group.start_soon(add, n)
    assert len(await store.list_webhook_endpoints(workspace.id)) == MAX_ENDPOINTS
    with pytest.raises(Conflict, match="delete one first"):
        await _endpoint(store, workspace.id, "more", "agent.created")
