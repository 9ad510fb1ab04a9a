"""A tool call through a self-hosted environment's work queue vs in a stead sandbox.

What is measured: for one ``bash`` call of ``true`` per turn, the time from the
``agent.tool_use`` event to the event that answers it, read from the two
events' ``processed_at`` (the server's clock, so no client overhead counts).
On a ``self_hosted`` environment that is the work queue's round trip: the turn
waits, ``stead worker`` (the SDK's ``EnvironmentWorker``, long-polling on
loopback) claims the session's item, runs the tool on this machine and posts a
``user.tool_result``. The baseline is the same call in a stead sandbox (the
sandbox host over its Unix socket, an exec under the op ledger), in the same
run, with the same zero-delay fake model. Both sessions run their turns
alternately after a warm-up. Reported, not asserted: the ratio says what the
queue adds; no budget is set by the issue.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import uuid
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import anthropic

from stead.testing import HostProcess, ServerProcess

# isort: split
from _common import median, ms, percentile, size
from _fake_server import fake_model_process
from _sandbox import require_root

TURNS = size("TURNS", 60, 3)
WARMUP = size("WARMUP", 5, 1)
TURN_TIMEOUT_S = 60.0


def _latency(events: list[Any]) -> float:
    """Seconds from the last turn's tool use to its answer."""
    use = next(e for e in reversed(events) if e.type == "agent.tool_use")
    answer = next(
        e
        for e in reversed(events)
        if e.type in ("agent.tool_result", "user.tool_result") and e.tool_use_id == use.id
    )
    return _at(answer.processed_at) - _at(use.processed_at)


def _at(value: datetime | str) -> float:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return moment.timestamp()


def _turn(client: anthropic.Anthropic, session_id: str) -> float:
    with client.beta.sessions.events.stream(session_id) as stream:
        client.beta.sessions.events.send(
            session_id,
            events=[{"type": "user.message", "content": [{"type": "text", "text": "bash"}]}],
        )
        for event in stream:
            if event.type == "session.status_idle":
                break
    events = list(client.beta.sessions.events.list(session_id, limit=1000, order="desc"))
    return _latency(list(reversed(events)))


def run() -> str:
    require_root()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stead-bench-")))
        model_url = stack.enter_context(fake_model_process("bash_once"))
        host = HostProcess(tmp / "host" / "state").start()
        stack.callback(host.stop)
        env = {
            "STEAD_UPSTREAM_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "bench-key-for-the-fake-model",
            "STEAD_LOG_LEVEL": "warning",
            **host.settings_env,
        }
        server = ServerProcess(tmp / "data", env=env).start()
        stack.callback(server.stop)
        assert server.first_key is not None
        client = anthropic.Anthropic(
            base_url=server.url, api_key=server.first_key, max_retries=0, timeout=TURN_TIMEOUT_S
        )
        stack.callback(client.close)
        agent = client.beta.agents.create(
            name="bench", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
        )
        cloud = client.beta.environments.create(name=f"cloud-{uuid.uuid4().hex[:6]}")
        mine = client.beta.environments.create(
            name=f"mine-{uuid.uuid4().hex[:6]}", config={"type": "self_hosted"}
        )
        made = client.post(f"/v1/environments/{mine.id}/keys", cast_to=object, body={})
        assert isinstance(made, dict)
        worker_dir = tmp / "worker"
        worker_dir.mkdir()
        log = stack.enter_context((tmp / "worker.log").open("wb"))
        command = [sys.executable, "-m", "stead", "worker", "--environment", mine.id]
        options = ["--url", server.url, "--environment-key", str(made["key"])]
        worker = subprocess.Popen(
            [*command, *options, "--workdir", str(worker_dir), "--max-idle", "600"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        stack.callback(worker.wait, 15)
        stack.callback(worker.terminate)
        in_sandbox = client.beta.sessions.create(agent=agent.id, environment_id=cloud.id).id
        queued = client.beta.sessions.create(agent=agent.id, environment_id=mine.id).id
        sandbox: list[float] = []
        queue: list[float] = []
        for round_ in range(WARMUP + TURNS):
            took_sandbox = _turn(client, in_sandbox)
            took_queue = _turn(client, queued)
            if round_ >= WARMUP:
                sandbox.append(took_sandbox)
                queue.append(took_queue)
    p50, base = median(queue), median(sandbox)
    return (
        f"work_queue: tool round trip p50 {ms(p50)} p99 {ms(percentile(queue, 99))} through "
        f"stead worker vs {ms(base)} in a stead sandbox ({p50 / base:.2f}x), {TURNS} turns each"
    )


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
