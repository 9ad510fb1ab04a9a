"""The heart of the agent loop's promise: SIGKILL at 31 points, restart, and check.

A scripted turn makes four model requests and five tool calls. Two bash calls
append a unique line to a ledger file outside the workspace and outside the
model's control (a non-idempotent side effect); read and glob are idempotent;
write is non-idempotent without a recorded result. The server is killed at 22
exact failpoints (``STEAD_FAILPOINTS``) and at 9 moments timed by the event
stream, then restarted on the same data directory. For every kill point:

* the session finishes its turn and goes idle;
* the log has no gap in ``seq``, no duplicate id, and a consistent order (every
  tool use answered once, after it; every span closed once, after it opened);
* every bash call that completed appended its line exactly once, none twice;
* a non-idempotent call cut short was answered "may have run", never silently re-run,
  except a bash command that never reached the sandbox: it runs, once;
* the user's message is there;
* killed right after the message's ack (its run claimed in the same commit,
  nothing else done), the turn runs as a second attempt, rescheduled once.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from stead.testing import (
    ChunkDelay,
    FakeModel,
    FaultRule,
    ServeForker,
    ServerProcess,
    Text,
    ToolCall,
    Turn,
    client_tls,
)
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env
from tests.integration.helpers import check_order, sse_frames, wait_idle_http
from tests.integration.helpers import message as user_message

Json = dict[str, Any]
FAILPOINTS = (
    [f"model.before_request:{n}" for n in (1, 2, 3)]
    + [f"model.after_answer:{n}" for n in (1, 2, 3)]
    + [f"tool.before_run:{n}" for n in (1, 2, 4, 5)]
    + [f"tool.after_run:{n}" for n in (1, 3, 4, 5)]
    + [f"store.before_commit:{n}" for n in (6, 9, 12, 15, 18, 21)]
    + ["turn.before_start:1", "turn.before_idle:1"]
)
STREAM_KILLS = [f"event:{n}" for n in (3, 5, 7, 9, 11, 13, 15, 17, 19)]
POINTS = FAILPOINTS + STREAM_KILLS
LANES = 3
"""Data directories worked at once: a lane mostly waits on its turn, so three share two cores."""
MAY_HAVE_RUN = "may have run"


def _token(body: Json) -> str:
    for message in body.get("messages", []):
        for block in message.get("content", []):
            if isinstance(block, dict) and block.get("type") == "text":
                text = str(block["text"])
                if text.startswith("crash "):
                    return text.split()[1]
    return "unknown"


def crash_script(ledger: Path) -> Any:
    def script(body: Json) -> Turn:
        token, step = _token(body), assistant_turns(body)
        first_command = f"sleep 0.2; echo {token}-a >> {ledger}; echo {token} > notes.txt"
        turns = [
            Turn(
                [
                    Text("Starting."),
                    ToolCall(
                        "bash",
                        {"command": first_command},
                    ),
                ]
            ),
            Turn(
                [
                    ToolCall("read", {"file_path": "notes.txt"}),
                    ToolCall("bash", {"command": f"echo {token}-b >> {ledger}; sleep 0.1"}),
                ]
            ),
            Turn(
                [
                    ToolCall("write", {"file_path": "out.txt", "content": f"{token}\n"}),
                    ToolCall("glob", {"pattern": "*.txt"}),
                ]
            ),
            Turn([Text("Finished.")]),
        ]
        return turns[step] if step < len(turns) else Turn([Text("done")])

    return script


@dataclass
class Outcome:
    point: str
    crashed: bool
    events: int
    attempts: int
    ledger_lines: int
    may_have_run: int
    reattached_or_rerun: int


class Lane:
    """One data directory, used for its points one after another."""

    def __init__(self, root: Path, fake: FakeModel, ledger: Path, forker: ServeForker) -> None:
        self.root = root
        self.fake = fake
        self.forker = forker
        self.ledger = ledger
        self.data = root / "data"
        self.key: str | None = None

    def server(self, failpoints: str | None) -> ServerProcess:
        extra = {"STEAD_FAILPOINTS": failpoints} if failpoints else {}
        env = loop_env(self.fake, STEAD_LEASE_SECONDS="30", **extra)
        # Two starts per point, sixty in all: forked, each takes a fraction of a
        # second instead of the seconds a fresh interpreter spends importing.
        process = ServerProcess(self.data, env=env, forker=self.forker)
        process.start()
        self.key = self.key or process.first_key
        return process

    def run_point(self, point: str) -> Outcome:
        failpoint = point if not point.startswith("event:") else None
        server = self.server(failpoint)
        assert self.key
        headers = {"x-api-key": self.key}
        token = uuid.uuid4().hex[:12]
        with httpx2.Client(
            verify=client_tls(), base_url=server.url, headers=headers, timeout=30
        ) as http:
            agent = http.post(
                "/v1/agents",
                json={"name": "c", "model": "m", "tools": [{"type": "agent_toolset_20260401"}]},
            )
            env = http.post("/v1/environments", json={"name": f"crash-{token}"})
            session_id = http.post(
                "/v1/sessions",
                json={"agent": agent.json()["id"], "environment_id": env.json()["id"]},
            ).json()["id"]
            try:
                sent = http.post(
                    f"/v1/sessions/{session_id}/events",
                    json={
                        "events": [
                            {
                                "type": "user.message",
                                "content": [{"type": "text", "text": f"crash {token}"}],
                            }
                        ]
                    },
                )
                acknowledged = sent.status_code == 200
            except httpx2.TransportError:
                acknowledged = False
        crashed = self._crash(server, session_id, point)
        server.kill()
        survivor = self.server(None)
        try:
            return self._check(survivor, session_id, token, point, crashed, acknowledged)
        finally:
            survivor.stop()

    def _crash(self, server: ServerProcess, session_id: str, point: str) -> bool:
        if point.startswith("event:"):
            wanted = int(point.split(":")[1])
            seen = 0
            url = f"{server.url}/v1/sessions/{session_id}/events/stream"
            try:
                with httpx2.stream(
                    "GET",
                    url,
                    headers={"x-api-key": self.key or ""},
                    timeout=30,
                    verify=client_tls(),
                ) as response:
                    # Resume from the start: count every logged event of the session.
                    for frame in sse_frames(response):
                        if "id" in frame:
                            seen += 1
                        if seen >= wanted:
                            server.kill()
                            return True
                        if frame["event"] == "session.status_idle":
                            return False
            except httpx2.TransportError:
                return True
            return False
        return server.wait_exit(timeout=30)

    def _check(
        self,
        server: ServerProcess,
        session_id: str,
        token: str,
        point: str,
        crashed: bool,
        acknowledged: bool,
    ) -> Outcome:
        assert self.key
        with httpx2.Client(
            verify=client_tls(), base_url=server.url, headers={"x-api-key": self.key}, timeout=30
        ) as http:
            wait_for_idle(http, session_id)
            events = http.get(f"/v1/sessions/{session_id}/events").json()["data"]
        seqs = stored_seqs(self.data / "stead.db", session_id)
        assert seqs == list(range(1, len(seqs) + 1)), f"{point}: gap in seq {seqs}"
        ids = [e["id"] for e in events]
        assert len(ids) == len(set(ids)) == len(seqs), f"{point}: duplicate or missing events"
        check_order(events, point)
        users = [e for e in events if e["type"] == "user.message"]
        if acknowledged:
            assert len(users) == 1, f"{point}: the user message was lost or doubled"
        assert events[-1]["type"] == "session.status_idle", f"{point}: not idle at the end"
        assert events[-1]["stop_reason"]["type"] == "end_turn", f"{point}: {events[-1]}"
        lines = [x for x in self.ledger.read_text().splitlines() if x.startswith(token)]
        counts = Counter(lines)
        assert all(n == 1 for n in counts.values()), f"{point}: a side effect ran twice: {counts}"
        results = {e["tool_use_id"]: e for e in events if e["type"] == "agent.tool_result"}
        read = next(u for u in events if u["type"] == "agent.tool_use" and u["name"] == "read")
        read_result = results[read["id"]]
        first_bash = results[next(u["id"] for u in events if u.get("name") == "bash")]
        if point == "tool.before_run:1":
            # Started in the ledger, never sent to the sandbox: the sandbox has no
            # record of its op key, so recovery runs it, and only then.
            assert not first_bash["is_error"], f"{point}: {first_bash}"
        if MAY_HAVE_RUN not in first_bash["content"][0]["text"]:
            # The file the first command wrote is there for the read, crash or not.
            assert token in read_result["content"][0]["text"], f"{point}: read saw {read_result}"
        uses = [e for e in events if e["type"] == "agent.tool_use"]
        bash = [u for u in uses if u["name"] == "bash"]
        for use, suffix in zip(bash, ("-a", "-b"), strict=True):
            result = results[use["id"]]
            text = result["content"][0]["text"]
            if not result["is_error"]:
                assert counts.get(token + suffix) == 1, (
                    f"{point}: completed {suffix} not in ledger once"
                )
            else:
                assert MAY_HAVE_RUN in text, f"{point}: unexpected bash error {text}"
        may_have_run = sum(MAY_HAVE_RUN in r["content"][0]["text"] for r in results.values())
        attempts = sum(e["type"] == "session.status_running" for e in events)
        if point == "turn.before_start:1":
            rescheduled = sum(e["type"] == "session.status_rescheduled" for e in events)
            assert (attempts, rescheduled) == (2, 1), f"{point}: {attempts} runs, {rescheduled}"
            assert not may_have_run, f"{point}: nothing had run, yet {may_have_run} may have"
        return Outcome(
            point=point,
            crashed=crashed,
            events=len(events),
            attempts=attempts,
            ledger_lines=len(lines),
            may_have_run=may_have_run,
            reattached_or_rerun=len(uses) - may_have_run,
        )


def wait_for_idle(http: httpx2.Client, session_id: str) -> None:
    url = f"/v1/sessions/{session_id}/events/stream"
    # Replay from the beginning, then live: the turn's final idle will come.
    listed = http.get(f"/v1/sessions/{session_id}/events", params={"limit": 1})
    assert listed.status_code == 200, f"{session_id}: {listed.status_code} {listed.text}"
    first = listed.json()["data"][0]["id"]
    with http.stream("GET", url, params={"after": first}, timeout=60) as response:
        for frame in sse_frames(response):
            stop = frame["data"].get("stop_reason", {}).get("type")
            if frame["event"] == "session.status_idle" and stop != "requires_action":
                status = http.get(f"/v1/sessions/{session_id}").json()["status"]
                if status == "idle":
                    return


def stored_seqs(db: Path, session_id: str) -> list[int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT seq FROM events WHERE session_id = ? ORDER BY seq", (session_id,)
        )
        return [int(r[0]) for r in rows]


@pytest.mark.timeout(600)
def test_sigkill_at_every_point(tmp_path: Path, forker: ServeForker) -> None:
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    faults = [FaultRule(ChunkDelay(0.01), times=None)]
    outcomes: list[Outcome] = []
    failures: list[BaseException] = []
    with FakeModel(crash_script(ledger), faults=faults, chunk_chars=4) as fake:
        lanes = [Lane(tmp_path / f"lane{i}", fake, ledger, forker) for i in range(LANES)]

        def work(lane: Lane, points: list[str]) -> None:
            try:
                for point in points:
                    outcomes.append(lane.run_point(point))
            except BaseException as exc:  # reported below, with the point's message
                failures.append(exc)

        threads = [
            threading.Thread(target=work, args=(lane, POINTS[i::LANES]))
            for i, lane in enumerate(lanes)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
    if failures:
        raise failures[0]
    assert len(outcomes) == len(POINTS) == 31
    crashed = [o for o in outcomes if o.crashed]
    print(f"\ncrash test: {len(crashed)}/{len(outcomes)} points killed the server mid-turn")
    print(f"{'point':<26}{'killed':>7}{'events':>8}{'runs':>6}{'ledger':>8}{'may-have-run':>14}")
    for o in sorted(outcomes, key=lambda o: POINTS.index(o.point)):
        print(
            f"{o.point:<26}{o.crashed!s:>7}{o.events:>8}{o.attempts:>6}{o.ledger_lines:>8}{o.may_have_run:>14}"
        )
    assert len(crashed) >= 28, "most kill points must land inside the turn"


@pytest.mark.timeout(300)
def test_a_turn_that_keeps_crashing_gives_up_after_five_attempts(
    tmp_path: Path, forker: ServeForker
) -> None:
    ledger = tmp_path / "ledger.txt"
    ledger.touch()
    with FakeModel(crash_script(ledger)) as fake:
        lane = Lane(tmp_path, fake, ledger, forker)
        server = lane.server("model.before_request:1")
        assert lane.key
        with httpx2.Client(
            verify=client_tls(), base_url=server.url, headers={"x-api-key": lane.key}, timeout=30
        ) as http:
            agent = http.post("/v1/agents", json={"name": "c", "model": "m"}).json()
            env = http.post("/v1/environments", json={"name": "doomed"}).json()
            body = {"agent": agent["id"], "environment_id": env["id"]}
            session_id = http.post("/v1/sessions", json=body).json()["id"]
            text = {"type": "text", "text": "crash doomed"}
            http.post(
                f"/v1/sessions/{session_id}/events",
                json={"events": [{"type": "user.message", "content": [text]}]},
            )
        failing = loop_env(fake, STEAD_FAILPOINTS="model.before_request:1")
        for attempt in range(1, 6):
            assert server.wait_exit(timeout=30), f"attempt {attempt} did not crash"
            server.kill()  # already dead: this closes its log
            # Recovery starts at once, so the restarted server may die before it answers.
            server = ServerProcess(lane.data, env=failing, forker=forker).launch()
        server.first_key = lane.key
        server._wait_ready()
        try:
            with httpx2.Client(
                verify=client_tls(), base_url=server.url, headers={"x-api-key": lane.key}
            ) as http:
                wait_for_idle(http, session_id)
                events = http.get(f"/v1/sessions/{session_id}/events").json()["data"]
        finally:
            server.kill()
    error = next(e for e in events if e["type"] == "session.error")
    assert error["error"]["retry_status"] == {"type": "exhausted"}
    assert events[-1]["stop_reason"] == {"type": "retries_exhausted"}
    assert sum(e["type"] == "session.status_rescheduled" for e in events) == 4
    check_order(events, "gave up")  # the span the last attempt opened is closed


@pytest.mark.timeout(120)
def test_a_given_up_turn_answers_its_started_call_and_never_runs_it_again(
    tmp_path: Path, forker: ServeForker
) -> None:
    """The server dies right after a bash call ran, on every attempt (each
    re-attaches to the call's record, then dies again), until the turn is given
    up. The call is answered then; the user's next message does not run it again."""
    ledger = tmp_path / "ledger.txt"
    ledger.touch()

    def script(body: Json) -> Turn:
        if assistant_turns(body) == 0:
            return Turn([ToolCall("bash", {"command": f"echo ran >> {ledger}"})])
        return Turn([Text("done")])

    with FakeModel(script) as fake:
        dying = loop_env(fake, STEAD_FAILPOINTS="tool.after_run:1", STEAD_MAX_RUN_ATTEMPTS="2")
        server = ServerProcess(tmp_path / "data", env=dying, forker=forker).start()
        key = server.first_key
        assert key
        with _client(server, key) as http:
            tools = [{"type": "agent_toolset_20260401"}]
            agent = http.post("/v1/agents", json={"name": "c", "model": "m", "tools": tools})
            env = http.post("/v1/environments", json={"name": "given-up"})
            body = {"agent": agent.json()["id"], "environment_id": env.json()["id"]}
            session_id = http.post("/v1/sessions", json=body).json()["id"]
            http.post(f"/v1/sessions/{session_id}/events", json={"events": [user_message("go")]})
        for attempt in (1, 2):
            assert server.wait_exit(timeout=30), f"attempt {attempt} did not crash"
            server.kill()  # already dead: this closes its log
            # Recovery starts at once: the restarted server may die before it answers.
            server = ServerProcess(server.data_dir, env=dying, forker=forker).launch()
        server._wait_ready()  # the third attempt gives up, running nothing
        with _client(server, key) as http:
            wait_idle_http(http, key, session_id)
        server.stop()
        server = ServerProcess(server.data_dir, env=loop_env(fake), forker=forker).start()
        try:
            with _client(server, key) as http:
                sent = {"events": [user_message("again")]}
                http.post(f"/v1/sessions/{session_id}/events", json=sent)
                wait_idle_http(http, key, session_id)
                events = http.get(f"/v1/sessions/{session_id}/events").json()["data"]
        finally:
            server.kill()
    assert ledger.read_text().splitlines() == ["ran"], "the given-up call ran again"
    stops = [e["stop_reason"]["type"] for e in events if e["type"] == "session.status_idle"]
    assert stops == ["retries_exhausted", "end_turn"]
    check_order(events, "given up")
    [result] = [e for e in events if e["type"] == "agent.tool_result"]
    assert result["is_error"] and MAY_HAVE_RUN in result["content"][0]["text"]
    given_up = next(i for i, e in enumerate(events) if e["type"] == "session.status_idle")
    assert events.index(result) < given_up, "the call was answered after the turn gave up"


def _client(server: ServerProcess, key: str) -> httpx2.Client:
    return httpx2.Client(
        verify=client_tls(), base_url=server.url, headers={"x-api-key": key}, timeout=30
    )
