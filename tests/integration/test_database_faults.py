"""``stead serve`` on PostgreSQL when the database is wrong, newer or goes away.

* start-up stops with one line for a server that refuses connections, a
  database migrated by a newer stead, and a missing ``STEAD_SECRET_KEY``;
* a PostgreSQL server of the test's own is crashed and started again while two
  ``stead serve`` processes take load: every failed request is a retryable 503
  in the error envelope (never a 500, never a dropped connection), nothing
  acknowledged is lost, both processes serve again and finish every turn by
  themselves, and a stream open across the crash goes on without a reconnect.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import anthropic
import anyio
import pytest
from sqlalchemy import text, update

from stead.store import migrate, open_store
from stead.testing import FakeModel, ServeForker, ServerProcess, free_port
from tests.conftest import loop_env, make_client
from tests.databases import PostgresRun, serve_env
from tests.databases import engine as engine_of
from tests.integration.helpers import lifespan_failed, message, new_session, wait_idle
from tests.integration.test_many_brains import _reader, _seqs_are_whole, idle_after_answer
from tests.pgcluster import ThrowawayPostgres, throwaway_postgres

pytestmark = pytest.mark.postgres
__all__ = ["throwaway_postgres"]  # the fixture, for this module's tests

START_TIMEOUT = 60.0
LOCK_TIMEOUT_MS = 3000
"""Longer than the wait bound, so the calls queued behind the held writers pass it."""
WRITERS = 4
"""A PostgreSQL store's write workers (``stead.store.POSTGRES_WRITERS``)."""
WAIT = 30.0
"""Longest a test waits for the load to reach a point or a turn to finish."""


def _serve(data_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``stead serve`` expected to stop by itself (it cannot start)."""
    command = [sys.executable, "-m", "stead", "serve", "--data-dir", str(data_dir)]
    return subprocess.run(
        [*command, "--port", str(free_port())],
        env={**env, "STEAD_SANDBOX": "off", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )


@pytest.fixture
def schema_url(postgres_run: PostgresRun) -> Iterator[str]:
    schema = postgres_run.new_schema()
    yield postgres_run.url(schema)
    postgres_run.drop_schema(schema)


def test_start_up_stops_with_one_line_for_each_database_fault(
    schema_url: str, tmp_path: Path, fake_model: FakeModel
) -> None:
    refused = serve_env("postgresql://stead:hunter2@127.0.0.1:1/stead")
    no_server = _serve(tmp_path / "a", loop_env(fake_model, **refused))
    assert no_server.returncode == 2
    lines = no_server.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "stead: STEAD_DATABASE_URL: cannot open postgresql://stead:***@127.0.0.1:1/stead"
    ), lines
    assert "hunter2" not in no_server.stderr + no_server.stdout

    no_key = _serve(tmp_path / "b", loop_env(fake_model, STEAD_DATABASE_URL=schema_url))
    assert no_key.returncode == 2
    assert no_key.stderr.strip().splitlines() == [
        "stead: STEAD_SECRET_KEY must be set on PostgreSQL: every stead serve of one database "
        "needs the same key (make one with: openssl rand -base64 32)"
    ]

    anyio.run(_make, schema_url)  # at this stead's head
    engine = engine_of(schema_url)
    with engine.begin() as conn:
        conn.execute(update(migrate.version_table).values(version_num="9999"))
    engine.dispose()
    newer = _serve(tmp_path / "c", loop_env(fake_model, **serve_env(schema_url)))
    assert newer.returncode == 2
    lines = newer.stderr.strip().splitlines()
    assert len(lines) == 1 and "migrated by a newer stead (revision 9999" in lines[0], lines
    assert "sk-stead-" not in newer.stdout


async def _make(url: str) -> None:
    await (await open_store(url)).close()


def test_writers_held_by_a_lock_answer_retryable_503s_then_serve_again(
    postgres_run: PostgresRun, tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    """Every writer waits on a row lock the test holds: each of them gives up at
    ``lock_timeout``, and the calls queued behind them once they waited
    ``STEAD_DATABASE_WAIT_SECONDS``; reads go on; once the lock goes, writes work."""
    schema = postgres_run.new_schema()
    options = quote(f"-csearch_path={schema} -clock_timeout={LOCK_TIMEOUT_MS}")
    url = f"{postgres_run.url()}?options={options}"
    env = loop_env(
        fake_model, **serve_env(url), STEAD_SANDBOX="off", STEAD_DATABASE_WAIT_SECONDS="1"
    )
    server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
    engine = engine_of(postgres_run.url(schema))
    try:
        with ExitStack() as stack:
            assert server.first_key, server.log_text()
            client = stack.enter_context(make_client(server.url, server.first_key))
            # On a loaded machine a call may wait past the short bound set here; this
            # client retries a 503 by itself, as the SDK does by default.
            retrying = stack.enter_context(make_client(server.url, server.first_key, max_retries=5))
            session_id = new_session(retrying)
            answers: list[tuple[int, str | None]] = []

            def send(i: int) -> None:
                try:
                    client.beta.sessions.events.send(session_id, events=[message(f"held {i}")])
                    answers.append((200, None))
                except anthropic.APIStatusError as exc:
                    answers.append((exc.status_code, exc.response.headers.get("x-should-retry")))

            with engine.connect() as conn, conn.begin():
                held = text("SELECT id FROM sessions WHERE id = :id FOR UPDATE")
                conn.execute(held, {"id": session_id})
                senders = [threading.Thread(target=send, args=(i,)) for i in range(WRITERS + 2)]
                for sender in senders:
                    sender.start()
                assert retrying.beta.sessions.retrieve(session_id).id == session_id  # reads go on
                for sender in senders:
                    sender.join(WAIT)
            assert answers == [(503, "true")] * (WRITERS + 2)
            retrying.beta.sessions.events.send(session_id, events=[message("after")])
            wait_idle(retrying, session_id, timeout=WAIT)
    finally:
        server.kill()
        engine.dispose()
        postgres_run.drop_schema(schema)


@dataclass
class Load:
    """What the load saw: acknowledged user events by session, and refusals."""

    acknowledged: dict[str, list[str]] = field(default_factory=dict)
    refusals: list[tuple[int, str | None, str]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.acknowledged)

    def refused(self) -> int:
        with self.lock:
            return len(self.refusals)


def _drive(load: Load, client: anthropic.Anthropic, name: str) -> None:
    """New sessions with one message each, until told to stop."""
    turn = 0
    while not load.stop.is_set():
        turn += 1
        try:
            session_id = new_session(client)
            sent = client.beta.sessions.events.send(session_id, events=[message(f"{name} {turn}")])
            with load.lock:
                load.acknowledged[session_id] = [e.id for e in sent.data]
        except anthropic.APIStatusError as exc:
            with load.lock:
                load.refusals.append(
                    (exc.status_code, exc.response.headers.get("x-should-retry"), exc.message)
                )
            time.sleep(0.05)
        except anthropic.APIError as exc:  # a dropped connection or a timeout
            with load.lock:
                load.other.append(repr(exc))


def _until(condition: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"waited {WAIT}s for {what}"
        time.sleep(0.05)


def test_a_database_restart_under_load_gives_retryable_errors_and_loses_nothing(
    throwaway_postgres: ThrowawayPostgres,
    tmp_path: Path,
    fake_model: FakeModel,
    forker: ServeForker,
) -> None:
    cluster = throwaway_postgres
    cluster.create_database("stead")
    env = loop_env(
        fake_model,
        **serve_env(cluster.url("stead")),
        STEAD_SANDBOX="off",
        STEAD_LEASE_SECONDS="2",
        STEAD_REAPER_INTERVAL_SECONDS="0.2",
        STEAD_BRAIN_HEARTBEAT_SECONDS="0.5",
        STEAD_BUS_POLL_SECONDS="0.5",
        # Every background loop asks the database while it is down (the webhook
        # courier, once, ended a process's runtime on that).
        STEAD_WEBHOOK_POLL_SECONDS="0.1",
    )
    servers = [
        ServerProcess(tmp_path / f"brain-{i}", env=env, forker=forker).start() for i in range(2)
    ]
    stack = ExitStack()
    try:
        key = servers[0].first_key
        assert key, servers[0].log_text()
        clients = [stack.enter_context(make_client(s.url, key)) for s in servers]
        load = Load()
        drivers = [
            threading.Thread(target=_drive, args=(load, c, f"c{i}"), daemon=True)
            for i, c in enumerate(clients)
        ]
        for driver in drivers:
            driver.start()
        watched = new_session(clients[1])
        # A reader of one process whose stream lives through the crash; the turn
        # it waits for is queued through the other process after the restart.
        reader, frames = _reader(
            f"{servers[1].url}/v1/sessions/{watched}/events/stream", key, idle_after_answer
        )
        _until(lambda: load.count() >= 4, "acknowledged sessions before the crash")
        cluster.stop()
        _until(lambda: load.refused() >= 2, "refusals while the database is down")
        cluster.start()
        after_restart = load.count()
        _until(lambda: load.count() >= after_restart + 4, "acknowledged sessions after it")
        load.stop.set()
        for driver in drivers:
            driver.join(WAIT)
        # From here on the SDK retries as a client would (a 503 says to, after a
        # second): a connection a worker held across the crash fails, retryably,
        # when next used.
        clients = [stack.enter_context(make_client(s.url, key, max_retries=5)) for s in servers]
        clients[0].beta.sessions.events.send(watched, events=[message("after the restart")])
        reader.join(WAIT)
        seen = [f["event"] for f in frames]
        assert "agent.message" in seen and seen[-1] == "session.status_idle", seen
        _seqs_are_whole(frames, [e.id for e in clients[0].beta.sessions.events.list(watched)])

        assert load.other == [], "every failure was an HTTP answer"
        for status, retry, text in load.refusals:
            assert (status, retry) == (503, "true"), (status, retry, text)
            assert "retry" in text
        for session_id, event_ids in load.acknowledged.items():
            reader = clients[hash(session_id) % 2]
            wait_idle(reader, session_id, timeout=WAIT)
            logged = [e.id for e in reader.beta.sessions.events.list(session_id, limit=100)]
            assert set(event_ids) <= set(logged), f"{session_id}: an acknowledged event is lost"
            answered = [e for e in reader.beta.sessions.events.list(session_id, limit=100)]
            assert any(e.type == "agent.message" for e in answered), session_id
        for server in servers:
            assert not server.wait_exit(0), server.log_text()
            crashed = [line for line in server.log_text().splitlines() if lifespan_failed(line)]
            assert crashed == [], "the app's lifespan (and its runtime) ended"
    finally:
        stack.close()
        for server in servers:
            server.kill()
