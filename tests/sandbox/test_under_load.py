"""Turns slow down under load; they never fail.

Spinning processes keep every core busy from before the sandbox host and the
server start until the last check, and several sessions run tool turns at
once through the official SDK, a real ``stead serve`` and a real bubblewrap
sandbox host: sandbox cold start, bash calls (one of them CPU-bound inside the
sandbox's own CPU limit), sleep after a short idle (a snapshot) and wake on the
next turn. Every turn must reach ``session.status_idle`` with ``end_turn``, with
no ``session.error`` and no tool result that is an error. A timeout sized for
an idle machine shows up here as a failed turn.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.sandbox_host.commands import NEW_SHELL
from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess, Text, ToolCall, Turn
from tests.conftest import loop_env, make_client
from tests.integration.helpers import message
from tests.sandbox.conftest import requires_isolation

pytestmark = requires_isolation

Json = dict[str, Any]
SPINNERS = 2 * (os.cpu_count() or 1)
"""Two per core: every core stays busy even while one spinner is descheduled."""
SESSIONS = 4
"""More sessions than cores: their sandboxes start, run, sleep and wake at once."""
TURNS = 2
SLEEP_AFTER = "3"
"""Idle seconds before a sandbox sleeps: short, so each session sleeps between
its turns, yet longer than the brain's pause between two calls of one model
answer on an overloaded machine (0.5 s was not: a sandbox slept between them,
and the second call found a new shell)."""
WAIT = 240.0
"""Longest a turn or a sandbox's sleep may take here: generous, as the test is
about whether things finish, not how fast; reaching it is a failure."""
LARGEST = 200_000
"""The CPU-bound call sorts this many numbers, inside the sandbox's CPU limit."""


def _steps_and_turn(body: Json) -> tuple[int, int]:
    """(model answers since the user's last message, that message's turn number)."""
    steps = 0
    for entry in reversed(body["messages"]):
        if entry["role"] == "assistant":
            steps += 1
            continue
        content = entry["content"]
        texts = [b["text"] for b in content if b.get("type") == "text"]
        if texts:
            return steps, int(texts[0].split()[-1])
    raise AssertionError(f"no user message in {body['messages']}")


def busy_turn(body: Json) -> Turn:
    steps, turn = _steps_and_turn(body)
    if steps == 0:
        return Turn(
            [
                Text("Counting."),
                ToolCall("bash", {"command": f"echo turn-{turn} >> turns.txt; wc -l < turns.txt"}),
                ToolCall("bash", {"command": f"seq {LARGEST} | sort -rn | head -n 1"}),
            ]
        )
    if steps == 1:
        return Turn([ToolCall("bash", {"command": "cat turns.txt"})])
    return Turn([Text("Done.")])


def expected_outputs(turn: int) -> list[str]:
    """The three bash results of ``turn``, in order; turns.txt outlives each sleep,
    and the first command after one is told its shell is new."""
    first = str(turn) if turn == 1 else NEW_SHELL + str(turn)
    return [first, str(LARGEST), "\n".join(f"turn-{n}" for n in range(1, turn + 1))]


@pytest.fixture
def busy_cores() -> Iterator[None]:
    spinners: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(SPINNERS):
            spinners.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait(timeout=30)


@pytest.fixture
def loaded_host(busy_cores: None, tmp_path: Path, forker: ServeForker) -> Iterator[HostProcess]:
    process = HostProcess(
        tmp_path / "host" / "state",
        env={"STEAD_SANDBOX_IDLE_CHECK_SECONDS": "0.2"},
        forker=forker,
    )
    try:
        yield process.start()
    finally:
        process.stop()


@pytest.fixture
def loaded_server(
    loaded_host: HostProcess, tmp_path: Path, forker: ServeForker
) -> Iterator[ServerProcess]:
    with FakeModel(busy_turn) as fake:
        env = loop_env(
            fake, STEAD_SANDBOX_SLEEP_AFTER_SECONDS=SLEEP_AFTER, **loaded_host.settings_env
        )
        process = ServerProcess(tmp_path / "data", env=env, forker=forker)
        try:
            yield process.start()
        finally:
            process.stop()


def new_tool_session(client: anthropic.Anthropic) -> str:
    agent = client.beta.agents.create(
        name="busy", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
    )
    environment = client.beta.environments.create(name=f"busy-{uuid.uuid4().hex[:8]}")
    return client.beta.sessions.create(agent=agent.id, environment_id=environment.id).id


def run_turn(client: anthropic.Anthropic, session_id: str, turn: int) -> list[Any]:
    """Sends turn ``turn``'s message; the turn's events, through its final idle
    or its first ``session.error`` (a retrying turn could take minutes to end)."""
    with client.beta.sessions.events.stream(session_id) as stream:
        client.beta.sessions.events.send(session_id, events=[message(f"turn {turn}")])
        seen: list[Any] = []
        for event in stream:
            seen.append(event)
            if event.type in ("session.status_idle", "session.error"):
                return seen
    raise AssertionError(f"{session_id}: the stream ended before turn {turn} went idle")


def wait_asleep(client: anthropic.Anthropic, session_id: str) -> None:
    """Until the session's sandbox has snapshotted and stopped (bounded)."""
    deadline = time.monotonic() + WAIT
    while True:
        view: Json = client.get(f"/v1/sessions/{session_id}/sandbox", cast_to=object)  # type: ignore[assignment]
        if view["state"] == "cold":
            return
        assert time.monotonic() < deadline, f"{session_id}: never went to sleep: {view}"
        time.sleep(0.2)


def check_turn(session_id: str, turn: int, events: list[Any]) -> None:
    where = f"{session_id} turn {turn}"
    errors = [e for e in events if e.type == "session.error"]
    assert not errors, f"{where}: {errors}"
    assert events[-1].stop_reason.type == "end_turn", f"{where}: {events[-1]}"
    results = [e for e in events if e.type == "agent.tool_result"]
    failed = [r for r in results if r.is_error]
    assert not failed, f"{where}: {failed}"
    outputs = [r.content[0].text.strip() for r in results]
    assert outputs == expected_outputs(turn), f"{where}: {outputs}"


def drive(client: anthropic.Anthropic, session_id: str) -> None:
    for turn in range(1, TURNS + 1):
        if turn > 1:
            wait_asleep(client, session_id)  # so this turn wakes it from its snapshot
        check_turn(session_id, turn, run_turn(client, session_id, turn))


@pytest.mark.timeout(2 * WAIT)
def test_tool_turns_on_busy_cores_all_finish_and_none_errors(
    loaded_server: ServerProcess,
) -> None:
    assert loaded_server.first_key, loaded_server.log_text()
    failures: list[BaseException] = []
    with make_client(loaded_server.url, loaded_server.first_key, timeout=WAIT) as client:
        sessions = [new_tool_session(client) for _ in range(SESSIONS)]

        def work(session_id: str) -> None:
            try:
                drive(client, session_id)
            except BaseException as exc:  # raised below, in the test's own thread
                failures.append(exc)

        threads = [threading.Thread(target=work, args=(s,)) for s in sessions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=2 * WAIT)
        assert not any(t.is_alive() for t in threads), "a session's turns never finished"
    if failures:
        raise failures[0]
