"""An interrupt that lands while the turn's write is committing (the model's
answer being recorded): the write commits anyway, so the turn must be closed
on a log that holds it. Found by a chaos soak: the closing read the log as it
was before that commit, so the answer's span was closed twice (its end, then
an error end) and its tool use was left unanswered at the idle, to run in the
next turn after all. Many sessions at once, each interrupted within a few
milliseconds of its message, hit that moment; before the fix, about one in
seven did."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, Text, ToolCall, Turn
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env, make_client, sdk_of
from tests.integration.helpers import check_order, message, wait_idle

SESSIONS = 40


def script(body: dict[str, Any]) -> Turn:
    if assistant_turns(body) == 0:
        return Turn([Text("Starting."), ToolCall("bash", {"command": "echo ran >> ledger"})])
    return Turn([Text("done")])


@pytest.mark.timeout(120)
def test_an_interrupt_during_the_answer_s_commit_closes_the_turn_on_it(
    tmp_path: Path, forker: ServeForker
) -> None:
    with FakeModel(script) as fake:
        server = ServerProcess(tmp_path / "data", env=loop_env(fake), forker=forker).start()
        try:
            with sdk_of(server) as sdk:
                agent = sdk.beta.agents.create(
                    name="race",
                    model="claude-sonnet-4-6",
                    tools=[{"type": "agent_toolset_20260401"}],
                )
                env = sdk.beta.environments.create(name=f"race-{uuid.uuid4().hex[:8]}")
                sessions = [
                    sdk.beta.sessions.create(agent=agent.id, environment_id=env.id).id
                    for _ in range(SESSIONS)
                ]

                def message_then_interrupt(session_id: str, seed: int) -> None:
                    assert server.first_key
                    with make_client(server.url, server.first_key) as own:
                        own.beta.sessions.events.send(session_id, events=[message("go")])  # type: ignore[list-item]
                        time.sleep(random.Random(seed).uniform(0, 0.03))
                        own.beta.sessions.events.send(
                            session_id,
                            events=[{"type": "user.interrupt"}],  # type: ignore[list-item]
                        )

                senders = [
                    threading.Thread(target=message_then_interrupt, args=(s, n))
                    for n, s in enumerate(sessions)
                ]
                for sender in senders:
                    sender.start()
                for sender in senders:
                    sender.join(60)
                for session_id in sessions:
                    wait_idle(sdk, session_id, timeout=60)
                    log = [
                        e.model_dump(mode="json")
                        for e in sdk.beta.sessions.events.list(session_id, limit=1000)
                    ]
                    check_order(log, session_id)
                    types = [e["type"] for e in log]
                    assert types[-1] == "session.status_idle", f"{session_id}: {types}"
                    ends = Counter(
                        e["model_request_start_id"]
                        for e in log
                        if e["type"] == "span.model_request_end"
                    )
                    assert set(ends.values()) <= {1}, f"{session_id}: {types}"
        finally:
            server.stop()
