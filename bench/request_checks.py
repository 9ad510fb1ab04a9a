"""What the budget, workspace limit and idempotency checks cost on the request
and turn paths, through the official SDK against one real ``stead serve``.

Each figure is a p50 beside its baseline from the same run, driven in
alternating rounds so drift hits both alike:

* text turn (``events.send`` -> ``session.status_idle`` on the stream) in a
  session with a budget, in a workspace whose four limits are all set (so the
  gate sums this month's ledger and counts leases before every model request),
  vs a plain session in a workspace without limits (its gate finds none).
* ``events.send`` and ``agents.create`` carrying an ``Idempotency-Key`` (a new
  one each time: the claim, one statement in the route's own write, and the
  kept answer, a write of its own after the answer was sent) vs the same call
  without one. The messages go to a session of their own, and the turns they
  queue are finished before the next round, so they never run beside a
  measured turn nor lengthen either side's context.

Beside each turn's wall time the server's own CPU time per turn is shown (read
from /proc around each side's block of turns): it moves far less than wall time
when the machine is busy with other work.

The target is that each check stays inside the brain's own budgets: a ratio
near 1, and the absolute difference in the ``brain.py`` request and turn
budgets' noise (well under 0.5 ms).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2

from stead.testing import ServerProcess, client_tls

# isort: split
from _common import cpu_seconds, ms, percentile, size, user_message
from _fake_server import served_without_sandbox

ROUNDS = size("ROUNDS", 10, 1)
PER_ROUND = size("PER_ROUND", 20, 2)
WARMUP = size("WARMUP", 10, 1)
MODEL = "claude-sonnet-4-6"
HUGE = 10**15
BUDGET = {"type": "limit", "max_list_cost": {"amount": "100000000", "currency": "USD"}}


def sdk(url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=30.0)


def timed(call: Callable[[], Any]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


class Side:
    """One side of a comparison: a client, a session and its open stream."""

    def __init__(self, client: anthropic.Anthropic, **session: Any) -> None:
        self.client = client
        agent = client.beta.agents.create(name="bench", model=MODEL)
        env = client.beta.environments.create(name=f"bench-{uuid.uuid4().hex[:8]}")
        self.session_id = client.beta.sessions.create(
            agent=agent.id, environment_id=env.id, **session
        ).id
        self.stream = client.beta.sessions.events.stream(self.session_id).__enter__()
        self.turns: list[float] = []
        self.cpu: list[float] = []

    def turn(self, text: str) -> float:
        start = time.perf_counter()
        self.client.beta.sessions.events.send(self.session_id, events=[user_message(text)])  # type: ignore[list-item]
        for event in self.stream:
            if event.type == "session.status_idle":
                return time.perf_counter() - start
            if event.type == "session.error":
                raise RuntimeError(f"the turn failed: {event}")
        raise RuntimeError("the stream ended before the session went idle")


def turns(side: Side, server_pid: int, count: int, label: str) -> None:
    """``count`` turns on ``side``, with the server's CPU time per turn."""
    before = cpu_seconds(server_pid)
    for i in range(count):
        side.turns.append(side.turn(f"{label} turn {i}"))
    side.cpu.append((cpu_seconds(server_pid) - before) / count)


def settle(client: anthropic.Anthropic, session_id: str) -> None:
    """Waits until the session has answered everything sent to it."""
    deadline = time.monotonic() + 60.0
    while client.beta.sessions.retrieve(session_id).status != "idle":
        if time.monotonic() > deadline:
            raise RuntimeError("the queued messages were not answered within 60 s")
        time.sleep(0.01)


def keyed() -> dict[str, str]:
    return {"Idempotency-Key": uuid.uuid4().hex}


def line(name: str, checked: list[float], plain: list[float], base: str) -> str:
    p50, b50 = percentile(checked, 50), percentile(plain, 50)
    return f"{name} p50 {ms(p50, 3)} vs {base} {ms(b50, 3)} = {p50 / b50:.2f}x ({ms(p50 - b50, 3)})"


def cpu_line(checked: Side, plain: Side) -> str:
    c50, b50 = percentile(checked.cpu, 50), percentile(plain.cpu, 50)
    # /proc counts CPU time in clock ticks (10 ms): a round of a few turns
    # (BENCH_SMOKE) may count none.
    ratio = f"{c50 / b50:.2f}x" if b50 > 0 else "no ratio (under one clock tick a round)"
    return f"server CPU per turn {ms(c50, 3)} vs plain {ms(b50, 3)} = {ratio}"


def run() -> str:
    with served_without_sandbox("echo") as server:
        return measure(server)


def measure(server: ServerProcess) -> str:
    assert server.first_key
    limited_key = server.create_key(new_workspace="limited")
    admin_key = server.create_key(admin=True)
    plain_client, limited_client = sdk(server.url, server.first_key), sdk(server.url, limited_key)
    own = limited_client.get("/v1/stead/limits", cast_to=httpx2.Response).json()
    limits = {
        "monthly_tokens": HUGE,
        "monthly_list_cost": {"amount": str(10**11), "currency": "USD"},
        "monthly_sandbox_seconds": HUGE,
        "concurrent_sandboxes": 1000,
    }
    with httpx2.Client(
        verify=client_tls(), base_url=server.url, headers={"x-api-key": admin_key}
    ) as admin:
        answer = admin.post(f"/v1/stead/workspaces/{own['workspace_id']}/limits", json=limits)
        answer.raise_for_status()
    plain, checked = Side(plain_client), Side(limited_client, budget=BUDGET)
    inbox = Side(plain_client)  # takes the measured sends
    for i in range(WARMUP):
        plain.turn(f"warm {i}")
        checked.turn(f"warm {i}")
    sends: dict[str, list[float]] = {"plain": [], "keyed": []}
    creates: dict[str, list[float]] = {"plain": [], "keyed": []}

    def send(headers: dict[str, str], text: str) -> None:
        plain_client.beta.sessions.events.send(
            inbox.session_id,
            events=[user_message(text)],  # type: ignore[list-item]
            extra_headers=headers,
        )

    def create(headers: dict[str, str]) -> None:
        plain_client.beta.agents.create(name="b", model=MODEL, extra_headers=headers)

    for round_ in range(ROUNDS):
        sides = (plain, checked) if round_ % 2 == 0 else (checked, plain)
        for side in sides:
            turns(side, server.pid, PER_ROUND, f"round {round_}")
        for label in ("plain", "keyed") if round_ % 2 == 0 else ("keyed", "plain"):
            for i in range(PER_ROUND):
                headers = keyed() if label == "keyed" else {}
                sends[label].append(timed(lambda: send(headers, f"queued {round_} {i}")))  # noqa: B023
                headers = keyed() if label == "keyed" else {}
                creates[label].append(timed(lambda: create(headers)))  # noqa: B023
        settle(plain_client, inbox.session_id)
    return "request_checks: " + " | ".join(
        [
            line("text turn with budget and limits", checked.turns, plain.turns, "plain"),
            cpu_line(checked, plain),
            line("events.send with Idempotency-Key", sends["keyed"], sends["plain"], "without"),
            line(
                "agents.create with Idempotency-Key", creates["keyed"], creates["plain"], "without"
            ),
        ]
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
