"""Usage, list cost, budgets and termination through the official SDK against a
real ``stead serve``, whose fake model reports known token counts.

The scripted turn makes two model requests of known usage (on
``claude-sonnet-4-6``: $3 / $15 / $3.75 / $0.30 per million input, output,
5-minute cache-write and cache-read tokens):

* a bash call: 100,000 in, 10,000 out, 20,000 cache writes: 52.5 cents;
* the answer: 50,000 in, 2,000 out, 20,000 cache reads: 18.6 cents;

so a whole turn costs 71.1 cents, shown as "71".
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.testing import (
    Delay,
    FakeModel,
    FaultRule,
    ReceivedRequest,
    ServeForker,
    ServerProcess,
    Text,
    ToolCall,
    Turn,
)
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env, make_client, store_env
from tests.databases import BACKENDS
from tests.integration.helpers import message, wait_idle

FIRST = {
    "input_tokens": 100_000,
    "output_tokens": 10_000,
    "cache_creation_input_tokens": 20_000,
    "cache_read_input_tokens": 0,
}
SECOND = {
    "input_tokens": 50_000,
    "output_tokens": 2_000,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 20_000,
}
MODEL = "claude-sonnet-4-6"
WAIT = 30.0


def script(body: dict[str, Any]) -> Turn:
    if assistant_turns(body) == 0:
        slow = "slow" in str(body["messages"][0]["content"])
        command = "sleep 60; echo slept >> ledger" if slow else "echo counted"
        return Turn([ToolCall("bash", {"command": command})], usage=FIRST)
    return Turn([Text("done")], usage=SECOND)


def budget(cents: str) -> Any:
    return {"type": "limit", "max_list_cost": {"amount": cents, "currency": "USD"}}


def held_first_answer(request: ReceivedRequest) -> bool:
    """The first request of a session whose first message says "held": answered
    late, so a message sent meanwhile waits in the queue."""
    first = str(request.body["messages"][0]["content"])
    return "held" in first and assistant_turns(request.body) == 0


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    faults = [FaultRule(Delay(2.0), times=None, when=held_first_answer)]
    with FakeModel(script, faults=faults) as started:
        yield started


@pytest.fixture(scope="module", params=BACKENDS)
def served(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    fake: FakeModel,
    forker: ServeForker,
) -> Iterator[ServerProcess]:
    """The module's server, on SQLite and on PostgreSQL."""
    with store_env(request) as extra:
        env = loop_env(fake, **extra)
        process = ServerProcess(tmp_path_factory.mktemp("usage"), env=env, forker=forker).start()
        yield process
        process.stop()


@pytest.fixture
def sdk(served: ServerProcess) -> Iterator[anthropic.Anthropic]:
    assert served.first_key
    with make_client(served.url, served.first_key) as client:
        yield client


def new_session(sdk: anthropic.Anthropic, model: str = MODEL, **extra: Any) -> str:
    agent = sdk.beta.agents.create(
        name="u", model=model, tools=[{"type": "agent_toolset_20260401"}]
    )
    env = sdk.beta.environments.create(name=f"u-{uuid.uuid4().hex[:10]}")
    return sdk.beta.sessions.create(agent=agent.id, environment_id=env.id, **extra).id


def wait_for_stop(sdk: anthropic.Anthropic, session_id: str, reason: str) -> list[Any]:
    """The log once it holds an idle with ``reason`` and the session is idle (bounded)."""
    deadline = time.monotonic() + WAIT
    while True:
        events = list(sdk.beta.sessions.events.list(session_id))
        stops = [e.stop_reason.type for e in events if e.type == "session.status_idle"]
        if reason in stops and sdk.beta.sessions.retrieve(session_id).status == "idle":
            return events
        assert time.monotonic() < deadline, f"no {reason} idle: {[e.type for e in events]}"
        time.sleep(0.02)


def wait_until_listed(sdk: anthropic.Anthropic, session_id: str, event_type: str) -> None:
    """Returns once the session's log holds an event of ``event_type`` (bounded)."""
    deadline = time.monotonic() + WAIT
    while not any(e.type == event_type for e in sdk.beta.sessions.events.list(session_id)):
        assert time.monotonic() < deadline, f"no {event_type}"
        time.sleep(0.02)


def span_totals(events: list[Any]) -> dict[str, int]:
    ends = [e.model_usage for e in events if e.type == "span.model_request_end"]
    return {key: sum(getattr(u, key) for u in ends) for key in FIRST}


def test_a_turns_usage_and_cost_reconcile_with_its_log(sdk: anthropic.Anthropic) -> None:
    session_id = new_session(sdk)
    sdk.beta.sessions.events.send(session_id, events=[message("count this")])
    events = wait_for_stop(sdk, session_id, "end_turn")
    assert span_totals(events) == {
        "input_tokens": 150_000,
        "output_tokens": 12_000,
        "cache_creation_input_tokens": 20_000,
        "cache_read_input_tokens": 20_000,
    }
    snapshot = next(e for e in reversed(events) if e.type == "session.usage")
    assert events[-2].id == snapshot.id  # right before the idle
    session = sdk.beta.sessions.retrieve(session_id)
    for usage in (snapshot.usage, session.usage):
        assert (usage.input_tokens, usage.output_tokens) == (150_000, 12_000)
        assert usage.cache_read_input_tokens == 20_000
        assert usage.cache_creation is not None
        assert usage.cache_creation.ephemeral_5m_input_tokens == 20_000
        assert usage.list_cost is not None
        assert (usage.list_cost.amount, usage.list_cost.currency) == ("71", "USD")
    # The bash call woke the session's sandbox: its awake time is counted.
    assert session.usage.active_seconds and session.usage.active_seconds > 0
    assert session.stats.active_seconds == session.usage.active_seconds
    assert snapshot.budget is None


def test_the_ledger_has_the_workspaces_usage_by_day_session_and_model(
    sdk: anthropic.Anthropic,
) -> None:
    session_id = new_session(sdk)
    sdk.beta.sessions.events.send(session_id, events=[message("ledger")])
    wait_for_stop(sdk, session_id, "end_turn")
    today = datetime.now(UTC).date()
    window = {"from": str(today - timedelta(days=1)), "to": str(today + timedelta(days=1))}
    report: Any = sdk.get("/v1/usage", options={"params": window}, cast_to=object)
    mine = [row for row in report["data"] if row["session_id"] == session_id]
    by_model = {row["model"]: row for row in mine}
    assert set(by_model) == {MODEL, None}
    assert by_model[MODEL]["requests"] == 2
    assert by_model[MODEL]["list_cost"] == {"amount": "71", "currency": "USD"}
    assert by_model[MODEL]["input_tokens"] == 150_000
    assert by_model[None]["active_seconds"] > 0
    assert report["total"]["requests"] >= 2
    with pytest.raises(anthropic.BadRequestError):
        backwards = {"from": "2026-02-01", "to": "2026-01-01"}
        sdk.get("/v1/usage", options={"params": backwards}, cast_to=object)


def test_a_budget_stops_the_turn_before_the_next_model_request(
    sdk: anthropic.Anthropic, fake: FakeModel
) -> None:
    session_id = new_session(sdk, budget=budget("50"))
    asked = fake.request_count
    sdk.beta.sessions.events.send(session_id, events=[message("spend")])
    events = wait_for_stop(sdk, session_id, "budget_reached")
    # The first request cost 52.5 cents: its tool ran, the second was never sent.
    assert fake.request_count == asked + 1
    assert [e.type for e in events[-3:]] == [
        "agent.tool_result",
        "session.usage",
        "session.status_idle",
    ]
    assert events[-2].usage.list_cost.amount == "53"
    assert events[-2].budget is not None and events[-2].budget.max_list_cost.amount == "50"
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.beta.sessions.events.send(session_id, events=[message("more")])
    assert "budget_reached" in str(refused.value.body)
    # An interrupt is accepted and ignored: not logged.
    sent = sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    assert sent.data == []
    assert len(list(sdk.beta.sessions.events.list(session_id))) == len(events)
    with pytest.raises(anthropic.BadRequestError) as lowered:
        sdk.beta.sessions.update(session_id, budget=budget("52"))
    assert "budget_not_raised" in str(lowered.value.body)
    # Raising it lets the stopped turn go on: the second request is made.
    sdk.beta.sessions.update(session_id, budget=budget("1000"))
    events = wait_for_stop(sdk, session_id, "end_turn")
    assert fake.request_count == asked + 2
    assert sdk.beta.sessions.retrieve(session_id).usage.list_cost.amount == "71"  # type: ignore[union-attr]


def test_an_interrupt_stops_a_turn_running_past_its_budget(sdk: anthropic.Anthropic) -> None:
    """Its model request crossed the cap and its command runs: an interrupt is
    no longer dropped as at the budget's pause, and stops the command."""
    session_id = new_session(sdk, budget=budget("50"))
    sdk.beta.sessions.events.send(session_id, events=[message("slow spend")])
    wait_until_listed(sdk, session_id, "agent.tool_use")
    sent = sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    assert [e.type for e in sent.data] == ["user.interrupt"]
    events = wait_for_stop(sdk, session_id, "end_turn")
    result = next(e for e in events if e.type == "agent.tool_result")
    assert result.is_error
    assert [e.type for e in events[-2:]] == ["session.usage", "session.status_idle"]


def queued_at_the_budget(sdk: anthropic.Anthropic) -> tuple[str, str]:
    """A session paused at its budget with a message (whose id is returned)
    still queued: sent while the request that crossed the cap was answered."""
    session_id = new_session(sdk, budget=budget("50"))
    sdk.beta.sessions.events.send(session_id, events=[message("held spend")])
    wait_until_listed(sdk, session_id, "span.model_request_start")
    [queued] = sdk.beta.sessions.events.send(session_id, events=[message("waiting")]).data
    assert queued.processed_at is None
    wait_for_stop(sdk, session_id, "budget_reached")
    return session_id, queued.id


def test_an_archived_session_logs_what_waited_at_its_budget(sdk: anthropic.Anthropic) -> None:
    """Archived, it takes no turn again: the message queued at the budget's
    pause is logged unanswered, not listed for good as still waiting."""
    session_id, queued_id = queued_at_the_budget(sdk)
    [waiting] = [e for e in sdk.beta.sessions.events.list(session_id) if e.id == queued_id]
    assert waiting.processed_at is None
    with sdk.beta.sessions.events.stream(session_id) as stream:
        sdk.beta.sessions.archive(session_id)
        events = list(sdk.beta.sessions.events.list(session_id))
        assert events[-1].id == queued_id
        assert all(e.processed_at is not None for e in events)
        streamed = next(iter(stream))  # readers learn of it too
    assert (streamed.id, streamed.processed_at is not None) == (queued_id, True)


def test_a_message_sent_while_a_turn_runs_past_its_budget_is_queued(
    sdk: anthropic.Anthropic,
) -> None:
    """Its model request crossed the cap and its command runs: the session is
    not paused at its budget yet, so a message is queued as during any turn
    (before, a 400 budget_reached); it is refused once the turn stopped."""
    session_id = new_session(sdk, budget=budget("50"))
    sdk.beta.sessions.events.send(session_id, events=[message("slow spend")])
    wait_until_listed(sdk, session_id, "agent.tool_use")
    [queued] = sdk.beta.sessions.events.send(session_id, events=[message("meanwhile")]).data
    assert (queued.type, queued.processed_at) == ("user.message", None)
    sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])
    events = wait_for_stop(sdk, session_id, "end_turn")
    # Queued before the interrupt: logged unanswered, as in any interrupted turn.
    [logged] = [e for e in events if e.id == queued.id]
    assert logged.processed_at is not None
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.beta.sessions.events.send(session_id, events=[message("after")])
    assert "budget_reached" in str(refused.value.body)


def test_budget_rules_on_create_and_update(sdk: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        new_session(sdk, model="no-such-priced-model", budget=budget("100"))
    assert "model_not_budgetable" in str(refused.value.body)
    session_id = new_session(sdk)
    with pytest.raises(anthropic.BadRequestError) as refused:
        sdk.beta.sessions.update(session_id, budget=budget("100"))
    assert "budget_create_only" in str(refused.value.body)
    limited = new_session(sdk, budget=budget("100"))
    assert sdk.beta.sessions.update(limited, budget=None).budget is None


def test_a_terminated_session_refuses_events(
    sdk: anthropic.Anthropic, served: ServerProcess
) -> None:
    session_id = new_session(sdk)
    sdk.beta.sessions.events.send(session_id, events=[message("before the end")])
    wait_idle(sdk, session_id)
    sandbox = served.data_dir / "sandboxes" / session_id  # unsafe_local's, unleased
    assert sandbox.is_dir()
    ended: Any = sdk.post(f"/v1/sessions/{session_id}/terminate", cast_to=object)
    assert ended["status"] == "terminated"
    session = sdk.beta.sessions.retrieve(session_id)
    assert session.status == "terminated"
    events = list(sdk.beta.sessions.events.list(session_id))
    assert events[-1].type == "session.status_terminated"
    with pytest.raises(anthropic.ConflictError):
        sdk.beta.sessions.events.send(session_id, events=[message("after the end")])
    with pytest.raises(anthropic.ConflictError):
        sdk.post(f"/v1/sessions/{session_id}/terminate", cast_to=object)
    # Its duration stopped at the end.
    again = sdk.beta.sessions.retrieve(session_id)
    assert again.stats.duration_seconds == session.stats.duration_seconds
    assert [s.id for s in sdk.beta.sessions.list(statuses=["terminated"])] == [session_id]
    # Before, an unleased sandbox outlived its session's end until the session
    # was deleted or the server stopped: no sweeper ever saw it.
    assert not sandbox.exists()


@pytest.mark.parametrize(
    "failpoint",
    ["model.after_answer:1", "tool.before_run:1", "model.after_answer:2", "turn.before_idle:1"],
)
def test_usage_is_counted_once_across_a_crash(
    failpoint: str, tmp_path: Path, fake: FakeModel, forker: ServeForker
) -> None:
    """Killed after an answer came but before it was recorded, the request is
    asked again and counted once; killed after it was recorded, never again."""
    env = loop_env(fake, STEAD_LEASE_SECONDS="30")
    data = tmp_path / "data"
    first = ServerProcess(data, env={**env, "STEAD_FAILPOINTS": failpoint}, forker=forker)
    first.start()
    key = first.first_key
    assert key
    with make_client(first.url, key) as sdk:
        session_id = new_session(sdk)
        sdk.beta.sessions.events.send(session_id, events=[message("crash")])
    assert first.wait_exit(timeout=WAIT)
    first.kill()
    survivor = ServerProcess(data, env=env, forker=forker).start()
    try:
        with make_client(survivor.url, key) as sdk:
            events = wait_for_stop(sdk, session_id, "end_turn")
            usage = sdk.beta.sessions.retrieve(session_id).usage
    finally:
        survivor.stop()
    totals = span_totals(events)
    assert (usage.input_tokens, usage.output_tokens) == (150_000, 12_000), failpoint
    assert (totals["input_tokens"], totals["output_tokens"]) == (150_000, 12_000)
    assert usage.list_cost is not None and usage.list_cost.amount == "71"
