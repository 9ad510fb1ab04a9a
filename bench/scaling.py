"""Scaling out: one ``stead serve`` on SQLite, one on PostgreSQL, three on one
PostgreSQL schema; throughput and the latency a reader of another process sees.

Every server runs at once (the fake model, zero delay, in a process of its own;
``STEAD_SANDBOX=off``: no tools), and the rounds go round the three set-ups,
the first of each round moving on, so drift on the machine hits each alike.
Clients are ``WORKERS`` threads of this process over plain httpx2 (the SDK's
own cost would blur the servers'), each with a session of its own on the
process ``worker % processes``:

* events/s: each worker POSTs ``user.interrupt`` events to its idle session
  one after another (the lightest event the API logs: committed, fanned out,
  and on PostgreSQL announced to the other processes; it starts no turn);
* turns/s: each worker sends a ``user.message`` and reads the session's SSE
  stream, on the next process, up to ``session.status_idle``, then the next;
* append -> reader: one writer POSTs a ``user.interrupt`` to the first process
  and a reader streams the session from the last (for three processes another
  one: the event reaches it as a NOTIFY and a read of the log). Timed from the
  append, the moment the event's write transaction began (its ``processed_at``,
  stamped by the writer from the machine's clock), to the reader having parsed
  its frame (the same clock); p50 and p99. Beside it: from just before the
  POST, which adds the request's own way in and out of the writing process, and
  the POST alone.

Throughputs are the median over ``ROUNDS`` rounds. Reported: a table of each
figure and its ratio to SQLite's, then one line with the scaling ratio (three
processes over one, on PostgreSQL) and the remote latency beside its floor:
PostgreSQL's own durable commit, ``NOTIFY`` -> ``LISTEN`` and one-row read,
taken with psycopg alone in each round of the same run. Budget: append ->
remote reader p50 <= 2 ms on loopback (the append-stamped figure).

The servers are real ``stead serve`` processes, forked by a ``ServeForker``
(as the tests start theirs): they share the imports, nothing else.

PostgreSQL is the server ``BENCH_POSTGRES_URL`` names (default: the local one,
trust auth); the benchmark makes schemas of its own there and drops them.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

import httpx2

from stead.testing import ServeForker, ServerProcess, client_tls

# isort: split
from _common import median, ms, percentile, size, stead_session, user_message, verdict
from _fake_server import fake_model_process
from _postgres import Floor, postgres_schema
from _stream import STOP_TEXT, StreamReader

WORKERS = size("WORKERS", 6, 2)
EVENTS = size("EVENTS", 900, 12)
TURNS = size("TURNS", 180, 4)
SAMPLES = size("SAMPLES", 300, 6)
ROUNDS = size("ROUNDS", 5, 1)
WARMUP = size("WARMUP", 20, 2)
PROCESSES = 3
BUDGET_S = 0.002
WAIT_S = 30.0
POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
INTERRUPT = {"type": "user.interrupt"}


@dataclass
class Setup:
    """One set-up under test: its processes and what was measured on it."""

    name: str
    servers: list[ServerProcess]
    key: str
    events: list[float] = field(default_factory=list)
    """Events per second, one figure per round."""
    turns: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    """The append (the event's ``processed_at``) -> the reader has its frame."""
    from_post: list[float] = field(default_factory=list)
    """Just before the POST -> the reader has the event's frame."""
    posts: list[float] = field(default_factory=list)
    _made: str = ""
    """A session made first: its agent and environment serve the others."""

    @property
    def headers(self) -> dict[str, str]:
        return {"x-api-key": self.key}

    def server(self, worker: int) -> ServerProcess:
        return self.servers[worker % len(self.servers)]

    def session(self, server: ServerProcess) -> str:
        """A new session, made through ``server``, on the set-up's agent."""
        if not self._made:
            # An agent and an environment of its own (environment names are unique).
            self._made = stead_session(self.servers[0])[1]
        with httpx2.Client(verify=client_tls(), headers=self.headers, timeout=WAIT_S) as client:
            made = client.get(f"{server.url}/v1/sessions/{self._made}").raise_for_status().json()
            body = {"agent": made["agent"]["id"], "environment_id": made["environment_id"]}
            answer = client.post(f"{server.url}/v1/sessions", json=body).raise_for_status()
        return str(answer.json()["id"])


def in_threads(
    calls: list[Callable[[], object]], failed: Callable[[], None] = lambda: None
) -> None:
    """Runs each call in a thread of its own and waits for them all (bounded);
    raises the first failure, after calling ``failed`` when it happens."""
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as exc:  # raised in the calling thread below
            errors.append(exc)
            failed()

    threads = [threading.Thread(target=run, args=(call,), daemon=True) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S * 4)
    if errors:
        raise errors[0]


def start_all(
    stack: ExitStack, forker: ServeForker, root: Path, plans: dict[str, tuple[int, dict[str, str]]]
) -> list[Setup]:
    """The set-ups ``plans`` names (processes, settings), their processes started."""
    groups = {
        name: [ServerProcess(root / f"{name}-{n}", env=env, forker=forker) for n in range(count)]
        for name, (count, env) in plans.items()
    }
    for group in groups.values():
        for server in group:
            stack.callback(server.stop)
    # The first of each makes its schema and prints the first key; the others join it.
    in_threads([group[0].start for group in groups.values()])
    in_threads([server.start for group in groups.values() for server in group[1:]])
    setups = []
    for name, group in groups.items():
        key = group[0].first_key
        if key is None:
            raise RuntimeError(f"{name}: no first API key:\n{group[0].log_text()}")
        for server in group:
            server.first_key = key
        setups.append(Setup(name, group, key))
    return setups


def together(count: int, work: Callable[[int, threading.Barrier], None]) -> float:
    """Runs ``work(worker, barrier)`` in ``count`` threads; seconds from the
    barrier's release (every worker ready) to the last one's end."""
    barrier = threading.Barrier(count + 1)
    began = 0.0

    def release() -> None:
        nonlocal began
        barrier.wait(WAIT_S)
        began = time.perf_counter()

    in_threads([release, *(partial(work, w, barrier) for w in range(count))], barrier.abort)
    return time.perf_counter() - began


def measure_events(setup: Setup, sessions: list[str], count: int) -> float:
    """Events per second: ``count`` interrupts from each worker."""

    def work(worker: int, barrier: threading.Barrier) -> None:
        url = f"{setup.server(worker).url}/v1/sessions/{sessions[worker]}/events"
        with httpx2.Client(verify=client_tls(), headers=setup.headers, timeout=WAIT_S) as client:
            client.get(f"{setup.server(worker).url}/v1/agents?limit=1").raise_for_status()
            barrier.wait(WAIT_S)
            for _ in range(count):
                client.post(url, json={"events": [INTERRUPT]}).raise_for_status()

    return WORKERS * count / together(WORKERS, work)


def read_until_idle(lines: Iterator[str]) -> None:
    for line in lines:
        idle = line.startswith("data:") and '"session.status_idle"' in line
        if idle and json.loads(line[5:])["type"] == "session.status_idle":
            return
    raise RuntimeError("the stream ended before the session went idle")


def measure_turns(setup: Setup, sessions: list[str], count: int) -> float:
    """Turns per second: ``count`` turns from each worker, one after another."""

    def work(worker: int, barrier: threading.Barrier) -> None:
        sender, reader = setup.server(worker), setup.server(worker + 1)
        path = f"/v1/sessions/{sessions[worker]}/events"
        timeout = httpx2.Timeout(WAIT_S)
        with (
            httpx2.Client(verify=client_tls(), headers=setup.headers, timeout=timeout) as client,
            client.stream("GET", f"{reader.url}{path}/stream") as stream,
        ):
            stream.raise_for_status()
            lines = stream.iter_lines()
            barrier.wait(WAIT_S)
            for i in range(count):
                body = {"events": [user_message(f"turn {i}")]}
                client.post(f"{sender.url}{path}", json=body).raise_for_status()
                read_until_idle(lines)

    return WORKERS * count / together(WORKERS, work)


class Latency:
    """A writer on the first process and a reader of the same session on the last."""

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        writer, reader = setup.servers[0], setup.servers[-1]
        self.session_id = setup.session(writer)
        self.url = f"{writer.url}/v1/sessions/{self.session_id}/events"
        self.reader = StreamReader(
            f"{reader.url}/v1/sessions/{self.session_id}/events/stream", setup.headers
        )
        self.reader.start()
        self.reader.wait_open()

    def sample(self, client: httpx2.Client) -> tuple[float, float, float]:
        """(the append -> the reader has the event, the POST -> the reader has
        it, the POST alone) seconds."""
        start = time.perf_counter()
        response = client.post(self.url, json={"events": [INTERRUPT]}, headers=self.setup.headers)
        posted = time.perf_counter()
        response.raise_for_status()
        event = response.json()["data"][0]
        appended = datetime.fromisoformat(event["processed_at"].replace("Z", "+00:00"))
        seen, seen_wall = self.reader.seen(event["id"])
        return seen_wall - appended.timestamp(), seen - start, posted - start

    def stop(self, client: httpx2.Client) -> None:
        body = {"events": [user_message(STOP_TEXT)]}
        client.post(self.url, json=body, headers=self.setup.headers).raise_for_status()
        self.reader.join(WAIT_S)


def measure(setups: list[Setup], floor: Floor) -> None:
    events = {s.name: [s.session(s.server(w)) for w in range(WORKERS)] for s in setups}
    turns = {s.name: [s.session(s.server(w)) for w in range(WORKERS)] for s in setups}
    latencies = [Latency(s) for s in setups]
    with httpx2.Client(verify=client_tls(), timeout=WAIT_S) as client:
        for setup, latency in zip(setups, latencies, strict=True):
            measure_events(setup, events[setup.name], WARMUP)
            measure_turns(setup, turns[setup.name], max(1, WARMUP // 4))
            for _ in range(WARMUP):
                latency.sample(client)
        for r in range(ROUNDS):
            for _ in range(SAMPLES // ROUNDS):
                floor.sample()
            order = setups[r % len(setups) :] + setups[: r % len(setups)]
            for setup in order:
                latency = latencies[setups.index(setup)]
                setup.events.append(
                    measure_events(setup, events[setup.name], EVENTS // ROUNDS // WORKERS)
                )
                setup.turns.append(
                    measure_turns(setup, turns[setup.name], max(1, TURNS // ROUNDS // WORKERS))
                )
                for _ in range(SAMPLES // ROUNDS):
                    took, from_post, post = latency.sample(client)
                    setup.latency.append(took)
                    setup.from_post.append(from_post)
                    setup.posts.append(post)
        for latency in latencies:
            latency.stop(client)


def table(setups: list[Setup]) -> list[str]:
    """The figures, one set-up a row; ``(…x)`` is the figure over the first row's."""
    base = setups[0]
    lines = [
        f"{'set-up':<14}{'events/s':>16}{'turns/s':>16}{'append->reader p50':>22}"
        f"{'p99':>10}{'POST->reader p50':>18}{'POST p50':>10}"
    ]
    for setup in setups:
        events, turns = median(setup.events), median(setup.turns)
        p50 = percentile(setup.latency, 50)
        lines.append(
            f"{setup.name:<14}"
            f"{events:>7.0f} ({events / median(base.events):.2f}x)"
            f"{turns:>7.1f} ({turns / median(base.turns):.2f}x)"
            f"{ms(p50):>13} ({p50 / percentile(base.latency, 50):.2f}x)"
            f"{ms(percentile(setup.latency, 99)):>10}"
            f"{ms(percentile(setup.from_post, 50)):>18}{ms(percentile(setup.posts, 50)):>10}"
        )
    return lines


def run() -> tuple[list[str], str]:
    """(the table, the summary line)."""
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stead-bench-")))
        model_url = stack.enter_context(fake_model_process("echo"))
        forker = stack.enter_context(ServeForker())
        env = {
            "STEAD_UPSTREAM_BASE_URL": model_url,
            "ANTHROPIC_API_KEY": "bench-key-for-the-fake-model",
            "STEAD_LOG_LEVEL": "warning",
            "STEAD_SANDBOX": "off",
        }
        shared = {"STEAD_SECRET_KEY": base64.b64encode(secrets.token_bytes(32)).decode()}
        one = {**env, **shared, "STEAD_DATABASE_URL": stack.enter_context(postgres_schema())}
        many = {**env, **shared, "STEAD_DATABASE_URL": stack.enter_context(postgres_schema())}
        plans = {
            "sqlite x1": (1, env),
            "postgres x1": (1, one),
            f"postgres x{PROCESSES}": (PROCESSES, many),
        }
        setups = start_all(stack, forker, tmp, plans)
        sqlite, pg1, pg3 = setups
        floor = stack.enter_context(Floor(stack.enter_context(postgres_schema())))
        measure(setups, floor)
    remote = percentile(pg3.latency, 50)
    commit, notify, read = (median(floor.commits), median(floor.notifies), median(floor.reads))
    events, turns = median(pg3.events) / median(pg1.events), median(pg3.turns) / median(pg1.turns)
    summary = (
        f"scaling: postgres x{PROCESSES} over x1: events/s {events:.2f}x, turns/s {turns:.2f}x"
        f" | append->remote reader p50 {ms(remote)} p99 {ms(percentile(pg3.latency, 99))}"
        f" (budget <= {ms(BUDGET_S, 0)}, {verdict(remote <= BUDGET_S)});"
        f" from before the POST {ms(percentile(pg3.from_post, 50))}, of which after the"
        f" POST's answer {ms(percentile(pg3.from_post, 50) - percentile(pg3.posts, 50))}"
        f" vs sqlite x1 same-process {ms(percentile(sqlite.latency, 50))}"
        f" = {remote / percentile(sqlite.latency, 50):.2f}x"
        f" | bare PostgreSQL p50: durable commit {ms(commit)}, NOTIFY->LISTEN {ms(notify)},"
        f" read {ms(read)}; remote path over their sum {remote / (commit + notify + read):.2f}x"
        f" | postgres x1 over sqlite x1:"
        f" events/s {median(pg1.events) / median(sqlite.events):.2f}x,"
        f" turns/s {median(pg1.turns) / median(sqlite.turns):.2f}x"
        f" | {WORKERS} client threads, {os.cpu_count()} CPUs, n={len(pg3.latency)}"
    )
    return table(setups), summary


def main() -> None:
    lines, summary = run()
    print("\n".join(lines), flush=True)
    print(summary, flush=True)


if __name__ == "__main__":
    main()
