"""The brain as a client sees it: start-up, request latency, turns and memory.

Everything goes through the official ``anthropic`` SDK over HTTP to a real
``stead serve`` with its default ``STEAD_SANDBOX=bwrap``; the fake model
(``stead.testing.FakeModel``, zero delay) runs in a process of its own. Each
figure is printed beside a baseline measured in the same run, and their ratio:

* start: ``stead serve`` spawned -> its first answered request, an
  authenticated ``agents.list`` on a data directory that already has a key (a
  restart), median of ``STARTS``; also the first start on an empty data
  directory (the schema created, the first key) -> first answer, and what the first
  ``agents.create`` after a start costs. The sandbox host autostarts as it does
  by default, on first use only: the bench checks none was started. Baseline:
  the bare uvicorn app (``_bare_server.py``) spawned -> its first answer.
* ``agents.create``, ``sessions.create``, ``events.send``: p50 and p99 through
  the SDK. Baseline: the bare app answering the same SDK call (same body, the
  same response bytes, parsed into the same SDK type), so the ratio is stead's
  own server work over the HTTP stack and the client. Rounds alternate. Beside
  ``events.send``, its durable floor: the bare app that also commits the events
  to a SQLite file before it answers, as stead's store commits (WAL,
  ``synchronous=FULL``), on its event loop: what any send that is durable when
  answered costs here, however little else it does.
* text turn: ``events.send`` of a ``user.message`` -> ``session.status_idle``
  read from the SDK's event stream (``events.stream``), p50 and p99. Baseline:
  one bare model call, the SDK streaming an answer straight from the fake model.
  Beside it, the turn's floor in HTTP and the SDK alone: the same send answered
  by the bare app, which streams the echo and then the turn's other events (the
  frames stead streamed for a turn, all in one write) to the SDK's stream, read
  up to ``session.status_idle``: no store, no model, no loop.
* bash turn: the same, with the model asking for one ``bash`` call (``true``)
  run in the session's warm bwrap sandbox through a real sandbox host (needs
  root). Baseline: two bare model calls and ``subprocess.run(["bash", "-c",
  "true"])``.
* long session: the same text turn in one session that already holds
  ``LONG_TURNS`` turns (seven events each), p50 of its last ``LONG_TAIL``.
  Baseline: a bare model call carrying the same history (the fake model parses
  it too). Also stead's own share (turn minus bare call) over the same share in
  sessions of ``PER_SESSION`` turns: what a long log adds to stead's work on
  each turn (every step renders and hashes the whole log it sends). No target.
* memory: RSS of ``stead serve`` after ``TURNS`` text turns. Baseline: the
  bare app's RSS. Also its RSS once started, before any model call: what the
  turns themselves add (their code's first use, caches, the log cache).

Targets: start <= 1 s, each request p50 <= 1.5 ms, text turn p50 <= 5 ms, bash
turn p50 <= 30 ms, RSS <= 80 MB.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anthropic
import httpx2
from anthropic import Stream
from anthropic.types.beta import BetaManagedAgentsAgent, BetaManagedAgentsSession
from anthropic.types.beta.sessions import (
    BetaManagedAgentsSendSessionEvents,
    BetaManagedAgentsStreamSessionEvents,
)

from stead.testing import HostProcess, ServerProcess, client_tls, free_port

# isort: split
from _common import (
    BENCH_DIR,
    BareServer,
    ms,
    percentile,
    rss_mb,
    size,
    user_message,
    verdict,
)
from _fake_server import fake_model_process

STARTS = size("STARTS", 7, 1)
REQUESTS = size("REQUESTS", 300, 10)
ROUNDS = size("ROUNDS", 10, 1)
TURNS = size("TURNS", 100, 4)
PER_SESSION = 5
LONG_TURNS = size("LONG_TURNS", 200, 4)
LONG_TAIL = size("LONG_TAIL", 20, 2)
BASH_TURNS = size("BASH_TURNS", 40, 3)
WARMUP = size("WARMUP", 10, 1)
MODEL = "claude-sonnet-4-6"
WAIT_S = 30.0
POLL_S = 0.002

START_BUDGET_S = 1.0
REQUEST_BUDGET_S = 0.0015
TURN_BUDGET_S = 0.005
BASH_BUDGET_S = 0.030
RSS_BUDGET_MB = 80.0


def sdk(url: str, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=WAIT_S)


def root_with_bwrap() -> bool:
    return os.geteuid() == 0 and shutil.which("bwrap") is not None


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


# start-up


def serve_env(data_dir: Path, port: int, model_url: str) -> dict[str, str]:
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("STEAD_", "ANTHROPIC_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    # Bytecode is written as an installed package has it; STEAD_SANDBOX is left
    # at its default (bwrap, the host started on first use).
    return {
        **inherited,
        "STEAD_DATA_DIR": str(data_dir),
        "STEAD_PORT": str(port),
        "STEAD_HOST": "127.0.0.1",
        "STEAD_LOG_LEVEL": "warning",
        "STEAD_UPSTREAM_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "bench-key-for-the-fake-model",
    }


@contextmanager
def spawned(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


def first_answer(process: subprocess.Popen[bytes], url: str, headers: dict[str, str]) -> None:
    """Polls ``url`` until it answers at all (any status)."""
    deadline = time.monotonic() + WAIT_S
    with httpx2.Client(verify=client_tls(), timeout=5.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{url}: the server exited with {process.returncode}")
            try:
                client.get(url, headers=headers)
                return
            except httpx2.TransportError:
                time.sleep(POLL_S)
    raise RuntimeError(f"{url}: no answer within {WAIT_S}s")


@dataclass
class Starts:
    first: list[float] = field(default_factory=list)
    restart: list[float] = field(default_factory=list)
    first_create: list[float] = field(default_factory=list)
    bare: list[float] = field(default_factory=list)
    hosts_started: int = 0


def start_once(root: Path, model_url: str, key: str | None, done: Starts) -> str:
    """One start of ``stead serve`` on ``root``; returns the API key it has."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = [sys.executable, "-m", "stead", "serve"]
    env = serve_env(root, port, model_url)
    start = time.perf_counter()
    with spawned(args, env, root / "serve.log") as process:
        headers = {"x-api-key": key} if key else {}
        first_answer(process, f"{url}/v1/agents?limit=1", headers)
        took = time.perf_counter() - start
        if key is None:
            done.first.append(took)
            key = read_key(root / "serve.log")
        else:
            done.restart.append(took)
        with sdk(url, key) as client:
            created, _ = timed(lambda: client.beta.agents.create(name="first", model=MODEL))
        done.first_create.append(created)
    if (root / "sandbox-host" / "host.log").exists():
        done.hosts_started += 1
    return key


def read_key(log: Path) -> str:
    for word in log.read_text(errors="replace").split():
        if word.startswith("sk-stead-"):
            return word
    raise RuntimeError(f"stead serve printed no first key:\n{log.read_text()}")


def bare_start(tmp: Path) -> float:
    port = free_port()
    args = [sys.executable, str(BENCH_DIR / "_bare_server.py"), str(port)]
    start = time.perf_counter()
    with spawned(args, dict(os.environ), tmp / "bare.log") as process:
        first_answer(process, f"http://127.0.0.1:{port}/ping", {})
        return time.perf_counter() - start


def measure_starts(tmp: Path, model_url: str) -> Starts:
    done = Starts()
    bare_start(tmp)  # warm-up: the page cache, the bytecode
    warm = tmp / "warm"
    start_once(warm, model_url, None, done)
    done.first.clear()
    done.first_create.clear()
    for i in range(STARTS):
        done.bare.append(bare_start(tmp))
        root = tmp / f"start-{i}"
        key = start_once(root, model_url, None, done)
        start_once(root, model_url, key, done)
        shutil.rmtree(root, ignore_errors=True)
    return done


# requests and turns


@dataclass
class Samples:
    agent: list[float] = field(default_factory=list)
    session: list[float] = field(default_factory=list)
    send: list[float] = field(default_factory=list)
    turn: list[float] = field(default_factory=list)
    bash: list[float] = field(default_factory=list)
    long: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    durable: list[float] = field(default_factory=list)


class Bench:
    def __init__(self, server: ServerProcess, bare: BareServer, model_url: str) -> None:
        assert server.first_key is not None
        self.server = server
        self.stead = sdk(server.url, server.first_key)
        self.bare = sdk(bare.url, "bare")
        self.bare_url = bare.url
        self.model = anthropic.Anthropic(base_url=model_url, api_key="x", max_retries=0)
        self.steads = Samples()
        self.bares = Samples()
        self.environment_id = self.stead.beta.environments.create(name="bench").id
        self.agent_id = self.stead.beta.agents.create(name="bench", model=MODEL).id
        self._canned()

    def _canned(self) -> None:
        """The bare app's answers: the very bytes stead answers the same calls with."""
        agent = self.stead.beta.agents.with_raw_response.create(name="bench", model=MODEL)
        session = self.stead.beta.sessions.with_raw_response.create(
            agent=self.agent_id, environment_id=self.environment_id
        )
        for name, raw in (("agent", agent), ("session", session)):
            self.bare.put(f"/blobs/{name}", body=raw.http_response.json(), cast_to=object)

    def new_agent(self, samples: Samples, client: anthropic.Anthropic) -> None:
        if client is self.stead:
            took, _ = timed(lambda: client.beta.agents.create(name="bench", model=MODEL))
        else:
            body = {"name": "bench", "model": MODEL}
            took, _ = timed(
                lambda: client.post("/blobs/agent", body=body, cast_to=BetaManagedAgentsAgent)
            )
        samples.agent.append(took)

    def new_session(self, samples: Samples, client: anthropic.Anthropic, agent_id: str) -> str:
        if client is self.stead:
            took, made = timed(
                lambda: client.beta.sessions.create(
                    agent=agent_id, environment_id=self.environment_id
                )
            )
            samples.session.append(took)
            return str(made.id)
        body = {"agent": agent_id, "environment_id": self.environment_id}
        took, _ = timed(
            lambda: client.post("/blobs/session", body=body, cast_to=BetaManagedAgentsSession)
        )
        samples.session.append(took)
        return ""

    def requests(self) -> None:
        per_round = max(1, REQUESTS // ROUNDS)
        for r in range(ROUNDS):
            order = [self.stead, self.bare] if r % 2 == 0 else [self.bare, self.stead]
            for client in order:
                samples = self.steads if client is self.stead else self.bares
                for _ in range(per_round):
                    self.new_agent(samples, client)
                for _ in range(per_round):
                    self.new_session(samples, client, self.agent_id)

    def bare_send(self, text: str, stream: Any) -> None:
        """The send's baseline; the echo it fans out to ``stream`` is read off
        it after, so the next bare turn starts with nothing waiting."""
        body = {"events": [user_message(text)]}
        took, _ = timed(
            lambda: self.bare.post("/events", body=body, cast_to=BetaManagedAgentsSendSessionEvents)
        )
        self.bares.send.append(took)
        for _ in stream:
            break
        took, _ = timed(
            lambda: self.bare.post(
                "/durable-events", body=body, cast_to=BetaManagedAgentsSendSessionEvents
            )
        )
        self.bares.durable.append(took)
        for _ in stream:
            break

    def canned_turn(self, session_id: str) -> None:
        """Stores in the bare app the frames of the session's last turn after its
        ``user.message`` echo, framed as stead frames them (``/turn`` streams them)."""
        raw = self.stead.beta.sessions.events.with_raw_response.list(session_id, limit=100)
        logged: list[dict[str, Any]] = raw.http_response.json()["data"]
        last = max(i for i, e in enumerate(logged) if e["type"] == "user.message")
        frames = b"".join(
            f"event: {e['type']}\nid: {e['id']}\ndata: ".encode()
            + json.dumps(e, separators=(",", ":"), ensure_ascii=False).encode()
            + b"\n\n"
            for e in logged[last + 1 :]
        )
        if not frames.endswith(b"\n\n") or b"session.status_idle" not in frames:
            raise RuntimeError(f"no finished turn to copy in {session_id}")
        httpx2.put(f"{self.bare_url}/blobs/turn", content=frames, timeout=WAIT_S).raise_for_status()

    def bare_stream(self) -> Stream[BetaManagedAgentsStreamSessionEvents]:
        return self.bare.get(
            "/stream",
            cast_to=cast(Any, BetaManagedAgentsStreamSessionEvents),
            stream=True,
            stream_cls=Stream[BetaManagedAgentsStreamSessionEvents],
        )

    def bare_turn(self, stream: Any, text: str) -> float:
        """The text turn's floor: ``turn`` against the bare app's canned turn."""
        body = {"events": [user_message(text)]}
        start = time.perf_counter()
        self.bare.post("/turn", body=body, cast_to=BetaManagedAgentsSendSessionEvents)
        for event in stream:
            if event.type == "session.status_idle":
                return time.perf_counter() - start
        raise RuntimeError("the bare app's stream ended before the turn's last event")

    def bare_model_call(self, text: str, history: list[Any] | None = None) -> float:
        """One streamed model call carrying ``text`` after ``history`` (messages)."""
        messages = [*(history or []), {"role": "user", "content": [{"type": "text", "text": text}]}]

        def call() -> None:
            stream = self.model.messages.create(
                model=MODEL, max_tokens=1024, messages=messages, stream=True
            )
            for _ in stream:
                pass

        took, _ = timed(call)
        return took

    def turn(self, session_id: str, stream: Any, text: str) -> tuple[float, float]:
        """(events.send, send -> status_idle on the stream) seconds."""
        start = time.perf_counter()
        self.stead.beta.sessions.events.send(session_id, events=[user_message(text)])
        sent = time.perf_counter() - start
        for event in stream:
            if event.type == "session.status_idle":
                return sent, time.perf_counter() - start
            if event.type == "session.error":
                raise RuntimeError(f"the turn failed: {event}")
        raise RuntimeError("the event stream ended before the session went idle")

    def text_turns(self, count: int, record: bool) -> None:
        done = 0
        with self.bare_stream() as bare_stream:
            while done < count:
                session_id = self.new_session(Samples(), self.stead, self.agent_id)
                with self.stead.beta.sessions.events.stream(session_id) as stream:
                    for _ in range(min(PER_SESSION, count - done)):
                        text = f"turn {done}"
                        sent, turn = self.turn(session_id, stream, text)
                        if not record and done == 0:
                            self.canned_turn(session_id)
                        call = self.bare_model_call(text)
                        self.bare_send(text, bare_stream)
                        floor = self.bare_turn(bare_stream, text)
                        if record:
                            self.steads.send.append(sent)
                            self.steads.turn.append(turn)
                            self.bares.turn.append(call)
                            self.bares.floor.append(floor)
                        done += 1

    def long_session(self) -> None:
        session_id = self.new_session(Samples(), self.stead, self.agent_id)
        with self.stead.beta.sessions.events.stream(session_id) as stream:
            for i in range(LONG_TURNS + LONG_TAIL):
                text = f"long {i}"
                if i >= LONG_TURNS:
                    # The model's own share of a long history: the same messages, sent bare.
                    self.bares.long.append(self.bare_model_call(text, self.history(session_id)))
                _, turn = self.turn(session_id, stream, text)
                if i >= LONG_TURNS:
                    self.steads.long.append(turn)

    def history(self, session_id: str) -> list[Any]:
        """The session's conversation as Messages API messages (its text turns)."""
        roles = {"user.message": "user", "agent.message": "assistant"}
        messages: list[Any] = []
        for event in self.stead.beta.sessions.events.list(session_id, limit=1000):
            if event.type in roles:
                content = [{"type": "text", "text": b.text} for b in event.content]  # type: ignore[union-attr]
                messages.append({"role": roles[event.type], "content": content})
        return messages

    def bash_turns(self, count: int) -> None:
        tools = [{"type": "agent_toolset_20260401"}]
        agent = self.stead.beta.agents.create(name="bash", model=MODEL, tools=tools)  # type: ignore[list-item]
        session_id = self.new_session(Samples(), self.stead, agent.id)
        with self.stead.beta.sessions.events.stream(session_id) as stream:
            for i in range(WARMUP + count):  # the first call starts the sandbox (cold)
                _, turn = self.turn(session_id, stream, f"bash {i}")
                calls = self.bare_model_call(f"bash {i}") + self.bare_model_call("ran it")
                shell, _ = timed(lambda: subprocess.run(["bash", "-c", "true"], check=True))
                if i >= WARMUP:
                    self.steads.bash.append(turn)
                    self.bares.bash.append(calls + shell)


def line(name: str, stead: list[float], bare: list[float], budget: float, base: str) -> str:
    p50, b50 = percentile(stead, 50), percentile(bare, 50)
    return (
        f"{name} p50 {ms(p50)} p99 {ms(percentile(stead, 99))}"
        f" (target <= {ms(budget, 1)}, {verdict(p50 <= budget)})"
        f" vs {base} p50 {ms(b50)} = {p50 / b50:.2f}x"
    )


def floor_line(
    name: str, what: str, budget: float, measured: list[float], floor: list[float]
) -> str:
    """``measured`` beside the least it can cost here (``floor``, described by ``what``)."""
    p50, f50 = percentile(measured, 50), percentile(floor, 50)
    return (
        f"{name}'s floor ({what}) p50 {ms(f50)} = {f50 / budget:.0%} of the target;"
        f" the {name} over it {p50 / f50:.2f}x"
    )


def long_line(long: list[float], bare: list[float], short: list[float], call: list[float]) -> str:
    p50, b50 = percentile(long, 50), percentile(bare, 50)
    added, short_added = p50 - b50, percentile(short, 50) - percentile(call, 50)
    return (
        f"text turn after {LONG_TURNS} turns in one session p50 {ms(p50)}"
        f" p99 {ms(percentile(long, 99))} vs bare model call with its history p50 {ms(b50)}"
        f" = {p50 / b50:.2f}x; stead's own share {ms(added)}, in a {PER_SESSION}-turn"
        f" session {ms(short_added)} = {added / short_added:.2f}x"
    )


def start_line(done: Starts) -> str:
    restart, bare = percentile(done.restart, 50), percentile(done.bare, 50)
    host = "no sandbox host started" if not done.hosts_started else "a sandbox host was STARTED"
    return (
        f"start -> first answer {ms(restart, 0)} (target <= {ms(START_BUDGET_S, 0)},"
        f" {verdict(restart <= START_BUDGET_S)}) vs bare uvicorn app {ms(bare, 0)}"
        f" = {restart / bare:.2f}x; first start on an empty data dir"
        f" {ms(percentile(done.first, 50), 0)}; first agents.create after a start"
        f" {ms(percentile(done.first_create, 50))}; {host}; n={len(done.restart)}"
    )


def run() -> str:
    lines: list[str] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stead-bench-")))
        model_url = stack.enter_context(fake_model_process("bash_once"))
        lines.append(start_line(measure_starts(tmp, model_url)))
        env = {
            "STEAD_UPSTREAM_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "bench-key-for-the-fake-model",
            "STEAD_LOG_LEVEL": "warning",
            "STEAD_SANDBOX_HOST_AUTOSTART": "false",
        }
        host: HostProcess | None = None
        if root_with_bwrap():
            host = HostProcess(tmp / "host" / "state").start()
            stack.callback(host.stop)
            env |= host.settings_env
        server = ServerProcess(tmp / "data", env=env).start()
        stack.callback(server.stop)
        started_rss = rss_mb(server.pid)
        bare = stack.enter_context(BareServer(free_port(), tmp / "bare-events.db"))
        bench = Bench(server, bare, model_url)
        bench.text_turns(WARMUP, record=False)
        bench.requests()
        bench.text_turns(TURNS, record=True)
        rss, bare_rss = rss_mb(server.pid), rss_mb(bare.pid)
        bench.long_session()
        if host is not None:
            bench.bash_turns(BASH_TURNS)
        s, b = bench.steads, bench.bares
        lines += [
            line("agents.create", s.agent, b.agent, REQUEST_BUDGET_S, "bare app"),
            line("sessions.create", s.session, b.session, REQUEST_BUDGET_S, "bare app"),
            line("events.send", s.send, b.send, REQUEST_BUDGET_S, "bare app"),
            floor_line(
                "events.send",
                "the bare app committing the events to SQLite, fsync'd, before it answers",
                REQUEST_BUDGET_S,
                s.send,
                b.durable,
            ),
            line("text turn", s.turn, b.turn, TURN_BUDGET_S, "bare model call"),
            floor_line(
                "text turn",
                "in HTTP and the SDK: the bare app answering the send and streaming the"
                " turn's events",
                TURN_BUDGET_S,
                s.turn,
                b.floor,
            ),
            long_line(s.long, b.long, s.turn, b.turn),
        ]
        if host is not None:
            lines.append(line("bash turn", s.bash, b.bash, BASH_BUDGET_S, "2 model calls + bash"))
        else:
            lines.append("bash turn: skipped (needs root and bubblewrap)")
        lines.append(
            f"RSS after {TURNS} turns {rss:.0f} MB (target <= {RSS_BUDGET_MB:.0f} MB,"
            f" {verdict(rss <= RSS_BUDGET_MB)}) vs bare app {bare_rss:.0f} MB"
            f" = {rss / bare_rss:.2f}x; once started, before the first model call"
            f" {started_rss:.0f} MB"
        )
    return "brain: " + " | ".join(lines)


def main() -> None:
    print(run(), flush=True)


if __name__ == "__main__":
    main()
