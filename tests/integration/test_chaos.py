"""Chaos on PostgreSQL: three ``stead serve`` processes on one database; in each
round a session made on one process gets its message through another, which
runs the turn and is SIGKILLed at a point of it, while the two others stream
the session (the SDK's ``events.stream``). The round's points: before the turn
starts, before the first model request and after its answer, before and after
the MCP call (the side effect, counted by a loopback MCP server), before the
last model request, and in the middle of its answer's stream. The process
killed is a new one each round; the two others live through the test.

For every round:

* the turn finishes on another process and ends idle, rescheduled once;
* the log's ``seq`` (read from the database) runs 1..n, its ids are unique, each
  tool use is answered once after it and each model span closes once;
* the MCP call ran at most once: once where it was sent, never again after a
  crash that left it in doubt (the model is told it "may have run");
* each reader got the whole log, in order, once, and a stream resumed with
  ``Last-Event-ID`` on the other reader's process gets the rest exactly;
* a session the survivors ran meanwhile finished its turn undisturbed;

and the MCP server's token (a vault credential) is in no event and no server's log.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2
import pytest
from sqlalchemy import text

from stead.testing import (
    FakeModel,
    FaultRule,
    ServeForker,
    ServerProcess,
    Stall,
    Text,
    ToolCall,
    Turn,
    assistant_turns,
)
from stead.testing.mcp_server import FakeMcpServer
from tests.conftest import make_client
from tests.databases import PostgresRun, engine
from tests.integration.brains import Brains
from tests.integration.helpers import check_order, message, wait_idle

pytestmark = pytest.mark.postgres

Json = dict[str, Any]
ECHO = "mcp__tools__echo"
MID_STREAM = "stream:last answer"
"""Not a failpoint: killed once the last model request's answer has begun to stream."""
MAY_HAVE_RUN = "may have run"
WAIT = 30.0


@dataclass(frozen=True)
class Expect:
    calls: int
    """Times the MCP server saw the round's call."""
    in_doubt: bool
    """The model was told the call may have run."""


POINTS = {
    "turn.before_start:1": Expect(1, False),
    "model.before_request:1": Expect(1, False),
    "model.after_answer:1": Expect(1, False),
    "mcp.before_call:1": Expect(0, True),
    "mcp.after_call:1": Expect(1, True),
    "model.before_request:2": Expect(1, False),
    MID_STREAM: Expect(1, False),
}


def _words(body: Json) -> str:
    first = body["messages"][0]["content"]
    return str(first[0]["text"]) if isinstance(first, list) else str(first)


def script(body: Json) -> Turn:
    """Echoes the user's words through the MCP server once, if it is offered; then answers."""
    offered = {t["name"] for t in body.get("tools", [])}
    if assistant_turns(body) == 0 and ECHO in offered:
        return Turn([ToolCall(ECHO, {"text": _words(body)})])
    return Turn([Text(f"done: {_words(body)}")])


def _last_request_of(words: str) -> Any:
    return lambda r: _words(r.body) == words and assistant_turns(r.body) == 1


@pytest.fixture(scope="module")
def mcp() -> Iterator[FakeMcpServer]:
    server = FakeMcpServer().start()
    yield server
    server.stop()


class Cluster:
    """Two processes that live through the test, and a third started anew (on a
    data directory of its own) for each round, to be killed in it."""

    def __init__(self, brains: Brains) -> None:
        self.brains = brains
        self.steady = [self._start(), self._start()]
        self.doomed: ServerProcess | None = None

    def _start(self, **extra: str) -> ServerProcess:
        # No keep-alive frames within a reader's timeout: a stream that stops
        # delivering fails the read instead of waiting out the test's timeout.
        return self.brains.start(STEAD_SSE_HEARTBEAT_SECONDS=str(WAIT * 4), **extra)

    def sdk(self, server: ServerProcess) -> anthropic.Anthropic:
        return make_client(server.url, self.brains.key, timeout=WAIT)

    def doom(self, **extra: str) -> ServerProcess:
        if self.doomed is not None:
            self.doomed.kill()  # already dead: this closes its log
        self.doomed = self._start(**extra)
        return self.doomed


@dataclass(frozen=True)
class Setup:
    agent: str
    plain_agent: str
    environment: str
    vault: str
    token: str
    """The MCP server's bearer token, kept in the vault."""


def _setup(sdk: anthropic.Anthropic, mcp: FakeMcpServer) -> Setup:
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "tools",
        "default_config": {"permission_policy": {"type": "always_allow"}},
    }
    agent = sdk.beta.agents.create(
        name="chaos",
        model="claude-sonnet-4-6",
        mcp_servers=[{"type": "url", "name": "tools", "url": mcp.url}],
        tools=[toolset],  # type: ignore[list-item]
    )
    plain = sdk.beta.agents.create(name="bystander", model="claude-sonnet-4-6")
    environment = sdk.beta.environments.create(name=f"chaos-{uuid.uuid4().hex[:8]}")
    vault = sdk.beta.vaults.create(display_name="chaos")
    token = mcp.issue_token()
    auth = {"type": "static_bearer", "mcp_server_url": mcp.url, "token": token}
    sdk.beta.vaults.credentials.create(vault.id, auth=auth)  # type: ignore[arg-type]
    return Setup(agent.id, plain.id, environment.id, vault.id, token)


def _finished(event: Json) -> bool:
    """The turn's last event: idle because it ended (not waiting on the client)."""
    return event["type"] == "session.status_idle" and event["stop_reason"]["type"] == "end_turn"


def _read(stream: Any) -> list[Json]:
    """Logged events from an open stream, up to the turn's final idle."""
    got: list[Json] = []
    try:
        for event in stream:
            got.append(event.model_dump(mode="json"))
            if _finished(got[-1]):
                return got
    except httpx2.ReadTimeout:
        raise AssertionError(f"no event within {WAIT}s after {[e['type'] for e in got]}") from None
    raise AssertionError(f"the stream ended before the turn did: {[e['type'] for e in got]}")


def _log(sdk: anthropic.Anthropic, session_id: str) -> list[Json]:
    return [
        e.model_dump(mode="json") for e in sdk.beta.sessions.events.list(session_id, limit=1000)
    ]


def _wait_for_request(fake: FakeModel, wanted: Any) -> None:
    """Blocks (bounded) until the fake model received a request ``wanted`` accepts."""
    seen = 0
    while True:
        received = fake.wait_for_requests(seen + 1, timeout=WAIT)
        if any(wanted(r) for r in received[seen:]):
            return
        seen = len(received)


def _seqs(brains: Brains, session_id: str) -> list[int]:
    db = engine(brains.url)
    try:
        with db.connect() as conn:
            rows = conn.execute(
                text("SELECT seq FROM events WHERE session_id = :s ORDER BY seq"), {"s": session_id}
            )
            return [int(r[0]) for r in rows]
    finally:
        db.dispose()


@dataclass
class Played:
    """A round's session, what each of its two readers got, and the bystander's session."""

    session_id: str
    frames: list[list[Json]]
    bystander: str


class Round:
    def __init__(
        self, cluster: Cluster, setup: Setup, fake: FakeModel, number: int, point: str
    ) -> None:
        self.cluster = cluster
        self.setup = setup
        self.fake = fake
        self.point = point
        # The session is made on one steady process and the bystander's turn
        # runs on the other; they swap each round.
        self.maker, self.other = cluster.steady[number % 2], cluster.steady[1 - number % 2]
        self.words = f"chaos-{number}-{uuid.uuid4().hex[:8]}"

    def play(self) -> Played:
        failpoint = {} if self.point == MID_STREAM else {"STEAD_FAILPOINTS": self.point}
        doomed = self.cluster.doom(**failpoint)
        if self.point == MID_STREAM:
            stall = Stall(after_chunks=3, seconds=WAIT)
            self.fake.add_fault(FaultRule(stall, when=_last_request_of(self.words)))
        with self.cluster.sdk(self.maker) as maker, self.cluster.sdk(self.other) as other:
            session_id = maker.beta.sessions.create(
                agent=self.setup.agent,
                environment_id=self.setup.environment,
                vault_ids=[self.setup.vault],
            ).id
            bystander = other.beta.sessions.create(
                agent=self.setup.plain_agent, environment_id=self.setup.environment
            ).id
            # Each stream is subscribed once its headers are in: it misses nothing sent after.
            with (
                maker.beta.sessions.events.stream(session_id) as first,
                other.beta.sessions.events.stream(session_id) as second,
            ):
                self._send(doomed, session_id)
                other.beta.sessions.events.send(bystander, events=[message("bystander")])  # type: ignore[list-item]
                self._die(doomed)
                return Played(session_id, [_read(first), _read(second)], bystander)

    def _send(self, doomed: ServerProcess, session_id: str) -> None:
        with (
            self.cluster.sdk(doomed) as sdk,
            # It may die before it answers: the message was committed with its run's claim.
            contextlib.suppress(anthropic.APIConnectionError),
        ):
            sdk.beta.sessions.events.send(session_id, events=[message(self.words)])  # type: ignore[list-item]

    def _die(self, doomed: ServerProcess) -> None:
        if self.point == MID_STREAM:
            _wait_for_request(self.fake, _last_request_of(self.words))
            doomed.kill()
        assert doomed.wait_exit(WAIT), f"{self.point}: the failpoint did not fire"

    def check(self, played: Played, mcp: FakeMcpServer) -> None:
        point, expect = self.point, POINTS[self.point]
        with self.cluster.sdk(self.maker) as maker, self.cluster.sdk(self.other) as other:
            log = _log(other, played.session_id)
            ids = [e["id"] for e in log]
            # Resumed on the process the first reader did not read from.
            middle = played.frames[0][len(played.frames[0]) // 2]["id"]
            with other.beta.sessions.events.stream(
                played.session_id, extra_headers={"Last-Event-ID": middle}
            ) as stream:
                resumed = [e["id"] for e in _read(stream)]
            wait_idle(maker, played.bystander)
            bystander = _log(maker, played.bystander)
        seqs = _seqs(self.cluster.brains, played.session_id)
        assert seqs == list(range(1, len(seqs) + 1)), f"{point}: a gap in seq {seqs}"
        assert len(set(ids)) == len(ids) == len(seqs), f"{point}: a duplicate or missing event"
        check_order(log, point)
        types = [e["type"] for e in log]
        assert types.count("user.message") == 1, f"{point}: {types}"
        assert types.count("session.status_rescheduled") == 1, f"{point}: {types}"
        assert _finished(log[-1]), f"{point}: {log[-1]}"
        for got in played.frames:
            assert [e["id"] for e in got] == ids, f"{point}: a reader's stream is not the log"
        assert resumed == ids[ids.index(middle) + 1 :], f"{point}: the resumed stream"
        assert mcp.tool_calls.count(("echo", {"text": self.words})) == expect.calls, point
        result = next(e for e in log if e["type"] == "agent.mcp_tool_result")
        said = result["content"][0]["text"]
        assert (MAY_HAVE_RUN in said) == expect.in_doubt == result["is_error"], f"{point}: {said}"
        assert self.setup.token not in json.dumps(log), f"{point}: the token is in the log"
        if not expect.in_doubt:
            assert said == self.words, f"{point}: {said}"
        kinds = [e["type"] for e in bystander]
        assert kinds.count("agent.message") == 1, f"{point}: bystander {kinds}"
        assert "session.status_rescheduled" not in kinds, f"{point}: bystander {kinds}"
        assert _finished(bystander[-1]), f"{point}: bystander {bystander[-1]}"


@pytest.mark.timeout(120)
def test_processes_killed_mid_turn_lose_and_repeat_nothing(
    postgres_run: PostgresRun,
    tmp_path_factory: pytest.TempPathFactory,
    forker: ServeForker,
    mcp: FakeMcpServer,
) -> None:
    with FakeModel(script) as fake:
        brains = Brains(postgres_run, tmp_path_factory.mktemp("chaos"), fake, forker)
        try:
            cluster = Cluster(brains)
            with cluster.sdk(cluster.steady[0]) as sdk:
                setup = _setup(sdk, mcp)
            for number, point in enumerate(POINTS):
                turn = Round(cluster, setup, fake, number, point)
                turn.check(turn.play(), mcp)
            for server in brains.servers:
                assert setup.token not in server.log_text(), server.log_path
        finally:
            brains.close()
