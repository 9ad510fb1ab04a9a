"""Several ``stead serve`` processes on one PostgreSQL schema, each with its own
data directory: a client sends to one and streams from another.

* events written by one process reach a reader of another, every one once, in
  order, and ``Last-Event-ID`` resumes on a third;
* a run queued through one process is run by whichever claims it first;
* a process SIGKILLed while it runs a turn: another finishes the turn (the dead
  process is known dead at once: same host, its pid is gone) and the reader's
  stream has no gap and no duplicate;
* a process SIGKILLed once its ``bash`` call ran (``unsafe_local``, whose op
  records are its own data directory's): the one that finishes the turn says
  the call may have run instead of running it again;
* ``stead db brains`` lists the processes and their heartbeats.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from sqlalchemy import text

from stead.runtime.turn_tools import MAY_HAVE_RUN
from stead.testing import (
    FakeModel,
    FaultRule,
    ServeForker,
    ServerProcess,
    Stall,
    Text,
    ToolCall,
    Turn,
    client_tls,
    echo,
)
from stead.testing.scripts import has_tool_results, last_user_text
from tests.conftest import loop_env, make_client
from tests.databases import PostgresRun
from tests.databases import engine as engine_of
from tests.integration.brains import Brains
from tests.integration.helpers import message, new_session, sse_frames, wait_idle

pytestmark = pytest.mark.postgres

STALLED = FaultRule(Stall(seconds=120), times=1, when=lambda r: "stall" in str(r.body))
"""The model's answer to a message saying "stall" never comes (a turn held mid-flight)."""

TOTAL = 60
SERVERS = 3


@pytest.fixture(scope="module")
def brains(
    postgres_run: PostgresRun,
    tmp_path_factory: pytest.TempPathFactory,
    fake_model: FakeModel,
    forker: ServeForker,
) -> Iterator[Brains]:
    group = Brains(postgres_run, tmp_path_factory.mktemp("brains"), fake_model, forker)
    try:
        for _ in range(SERVERS):
            group.start()
        yield group
    finally:
        group.close()


def _client(server: ServerProcess, key: str) -> anthropic.Anthropic:
    return make_client(server.url, key)


Done = Callable[[list[dict[str, Any]]], bool]


def messages(count: int) -> Done:
    return lambda got: sum(f["event"] == "user.message" for f in got) >= count


def idle_after_answer(got: list[dict[str, Any]]) -> bool:
    answered = [i for i, f in enumerate(got) if f["event"] == "agent.message"]
    return bool(answered) and got[-1]["event"] == "session.status_idle"


def _stream(
    url: str, key: str, done: Done, opened: threading.Event, last_id: str | None = None
) -> list[dict[str, Any]]:
    """Logged frames (those with an SSE id) until ``done`` says so."""
    headers = {"x-api-key": key}
    if last_id is not None:
        headers["Last-Event-ID"] = last_id
    got: list[dict[str, Any]] = []
    with httpx2.stream("GET", url, headers=headers, timeout=60, verify=client_tls()) as response:
        assert response.status_code == 200
        opened.set()  # the server subscribes before it sends the headers
        for frame in sse_frames(response):
            if "id" not in frame:
                continue
            got.append(frame)
            if done(got):
                break
    return got


def _reader(url: str, key: str, done: Done, last_id: str | None = None) -> Any:
    """Starts a reader thread; returns (thread, the frames it fills)."""
    frames: list[dict[str, Any]] = []
    opened = threading.Event()

    def read() -> None:
        frames.extend(_stream(url, key, done, opened, last_id))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    assert opened.wait(30)
    return thread, frames


def _seqs_are_whole(frames: list[dict[str, Any]], log: list[str]) -> None:
    ids = [f["data"]["id"] for f in frames]
    assert len(ids) == len(set(ids)), "a duplicate event"
    start = log.index(ids[0])
    assert ids == log[start : start + len(ids)], "a gap or an order other than the log's"


def test_a_reader_of_another_process_sees_every_event_once_in_order(brains: Brains) -> None:
    a, b, c = brains.servers[:3]
    with _client(a, brains.key) as sdk_a, _client(c, brains.key) as sdk_c:
        session_id = new_session(sdk_a)
        path = f"/v1/sessions/{session_id}/events/stream"
        thread, frames = _reader(b.url + path, brains.key, messages(TOTAL))
        for i in range(TOTAL):
            sdk_a.beta.sessions.events.send(session_id, events=[message(f"m{i}")])
        thread.join(60)
        assert not thread.is_alive()
        wait_idle(sdk_c, session_id)
        log = [e.id for e in sdk_c.beta.sessions.events.list(session_id, limit=1000).data]
    _seqs_are_whole(frames, log)
    texts = [f["data"]["content"][0]["text"] for f in frames if f["event"] == "user.message"]
    assert texts == [f"m{i}" for i in range(TOTAL)]
    # Resumed on a third process from the middle of what the second delivered.
    middle = frames[len(frames) // 2]["data"]["id"]
    rest = log[log.index(middle) + 1 :]
    thread, resumed = _reader(c.url + path, brains.key, messages(1), last_id=middle)
    thread.join(60)
    assert [f["data"]["id"] for f in resumed] == rest[: len(resumed)]
    assert resumed and resumed[0]["data"]["id"] == rest[0]


def test_every_process_answers_turns_of_sessions_made_elsewhere(brains: Brains) -> None:
    a, b = brains.servers[:2]
    with _client(a, brains.key) as sdk_a, _client(b, brains.key) as sdk_b:
        session_id = new_session(sdk_a)
        sdk_b.beta.sessions.events.send(session_id, events=[message("hello from b")])
        wait_idle(sdk_a, session_id)
        events = sdk_a.beta.sessions.events.list(session_id, limit=1000).data
    assert [e.type for e in events].count("agent.message") == 1


def test_a_turn_of_a_killed_process_finishes_on_another(brains: Brains) -> None:
    # The doomed process dies as its turn's first model request is about to go out,
    # after it acknowledged the message (and claimed its run in that same commit).
    doomed = brains.start(STEAD_FAILPOINTS="model.before_request:1")
    reader = brains.servers[1]
    with _client(doomed, brains.key) as sdk_doomed, _client(reader, brains.key) as sdk:
        session_id = new_session(sdk)
        path = f"/v1/sessions/{session_id}/events/stream"
        thread, frames = _reader(reader.url + path, brains.key, idle_after_answer)
        sdk_doomed.beta.sessions.events.send(session_id, events=[message("survive")])
        assert doomed.wait_exit(30), "the failpoint did not fire"
        wait_idle(sdk, session_id, timeout=60)
        thread.join(30)
        log = sdk.beta.sessions.events.list(session_id, limit=1000).data
    types = [e.type for e in log]
    assert types.count("agent.message") == 1
    assert types.count("session.status_rescheduled") == 1
    _seqs_are_whole(frames, [e.id for e in log])


def test_a_bash_call_of_a_killed_process_is_not_run_again_by_another(
    postgres_run: PostgresRun, tmp_path: Path, forker: ServeForker
) -> None:
    """The doomed process dies right after its ``bash`` call ran, before its
    result was written. Its sandbox's op records were in its own data
    directory, which the process that takes the turn over never sees: there
    the call is in doubt (before, it was made again and ran twice)."""
    ran = tmp_path / "ran"

    def rule(body: dict[str, Any]) -> Turn:
        if has_tool_results(body):
            return Turn([Text("done")])
        if last_user_text(body) == "run it":
            return Turn([ToolCall("bash", {"command": f"echo ran >> {ran}"})])
        return echo(body)

    with FakeModel(rule) as fake:
        group = Brains(postgres_run, tmp_path / "brains", fake, forker)
        try:
            survivor = group.start()
            doomed = group.start(STEAD_FAILPOINTS="tool.after_run:1")
            with _client(doomed, group.key) as sdk_doomed, _client(survivor, group.key) as sdk:
                session_id = new_session(sdk, [{"type": "agent_toolset_20260401"}])
                sdk_doomed.beta.sessions.events.send(session_id, events=[message("run it")])
                assert doomed.wait_exit(30), "the failpoint did not fire"
                wait_idle(sdk, session_id, timeout=60)
                log = sdk.beta.sessions.events.list(session_id, limit=1000).data
        finally:
            group.close()
    results = [e for e in log if e.type == "agent.tool_result"]
    assert len(results) == 1 and results[0].is_error
    assert MAY_HAVE_RUN in results[0].content[0].text  # type: ignore[index, union-attr]
    assert ran.read_text() == "ran\n"


def test_db_brains_lists_each_process(brains: Brains) -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "stead", "db", "brains"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "STEAD_DATABASE_URL": brains.url},
    )
    assert listed.returncode == 0, listed.stderr
    for server in brains.servers:
        if server.wait_exit(0):
            continue
        assert f":{server.pid}" in listed.stdout or str(server.pid) in listed.stdout


def _end_bus_connections(url: str, *, senders: bool) -> int:
    """Ends every connection of the database that has sent notices (``senders``),
    or every one that listens for them, as a restart, a failover or an idle
    timeout would: the next send fails, or a listener hears nothing until it
    has connected again."""
    found = engine_of(url)
    sent = "LIKE" if senders else "NOT LIKE"
    try:
        with found.begin() as conn:
            ended = conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'stead-bus' AND datname = current_database()"
                    f" AND query {sent} '%pg_notify%'"
                )
            ).all()
    finally:
        found.dispose()
    return len(ended)


def _interrupted_after_lost_connections(
    postgres_run: PostgresRun, tmp_path: Path, forker: ServeForker, *, senders: bool
) -> list[str]:
    """The types of the log of a turn that one process runs, stalled in its model
    call, and that an interrupt sent through another process stops, the bus
    connections of ``senders`` ended (``_end_bus_connections``) just before.
    With ``senders``, the other process first sends a message, so it has a
    sender connection to lose."""
    with FakeModel(echo, faults=[STALLED]) as fake:
        group = Brains(postgres_run, tmp_path / "brains", fake, forker)
        try:
            runner, other = group.start(), group.start()
            with _client(runner, group.key) as sdk, _client(other, group.key) as sdk_other:
                session_id = new_session(sdk)
                if senders:
                    sdk_other.beta.sessions.events.send(session_id, events=[message("hello")])
                    wait_idle(sdk, session_id)
                sdk.beta.sessions.events.send(session_id, events=[message("stall")])
                fake.wait_for_requests(2 if senders else 1)
                assert _end_bus_connections(group.url, senders=senders) >= 1
                interrupt = {"type": "user.interrupt"}
                sdk_other.beta.sessions.events.send(session_id, events=[interrupt])
                wait_idle(sdk, session_id, timeout=15)
                log = sdk.beta.sessions.events.list(session_id, limit=1000).data
        finally:
            group.close()
    return [e.type for e in log]


def test_an_interrupt_sent_after_a_lost_bus_connection_reaches_the_turn(
    postgres_run: PostgresRun, tmp_path: Path, forker: ServeForker
) -> None:
    """The process the interrupt is sent to lost its bus connection (a database
    restart, an idle timeout): its next send fails. Before, the notices of that
    send were dropped, so the turn running on the other process never heard of
    the interrupt and ran on until its model answered."""
    types = _interrupted_after_lost_connections(postgres_run, tmp_path, forker, senders=True)
    assert types.count("agent.message") == 1  # the first turn's only


def test_an_interrupt_sent_while_the_turn_s_process_was_not_listening_reaches_the_turn(
    postgres_run: PostgresRun, tmp_path: Path, forker: ServeForker
) -> None:
    """The process running the turn lost its listening connection, and the
    interrupt's notice came while it connected again. Before, nothing looked
    for the interrupt in the log, so the turn ran on until its model answered."""
    types = _interrupted_after_lost_connections(postgres_run, tmp_path, forker, senders=False)
    assert "agent.message" not in types and types[-1] == "session.status_idle"


def test_a_stream_of_a_session_deleted_while_its_process_was_not_listening_ends(
    brains: Brains,
) -> None:
    """The reader's process lost its listening connection, and the deletion's
    notice came while it connected again. Before, its stream stayed open for
    ever (pings only): nothing it read again said the session was gone."""
    reader, other = brains.servers[1], brains.servers[2]
    with _client(other, brains.key) as sdk:
        session_id = new_session(sdk)
        path = f"/v1/sessions/{session_id}/events/stream"
        thread, frames = _reader(reader.url + path, brains.key, lambda _got: False)
        assert _end_bus_connections(brains.url, senders=False) >= 1
        sdk.beta.sessions.delete(session_id)
        thread.join(15)
    assert not thread.is_alive(), "the stream of the deleted session stayed open"
    assert frames == []


def test_a_process_whose_recovery_at_start_cannot_be_served_starts_all_the_same(
    postgres_run: PostgresRun, tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    """The runs table is locked by another transaction as a second process
    starts (a lock not granted is a ``DatabaseBusy``, as a database away for a
    moment). Before, its start-up recovery raised out of the runtime: a
    traceback and 'Application startup failed'. Now the round is skipped, as
    the reaper's are, and the process serves; the reaper recovers later."""
    group = Brains(postgres_run, tmp_path / "brains", fake_model, forker)
    try:
        first = group.start()
        # Lock waits of a tenth of a second (the URL's options come after stead's).
        quick = group.url.replace("?options=", "?options=-c%20lock_timeout%3D100%20")
        env = loop_env(
            fake_model,
            STEAD_DATABASE_URL=quick,
            STEAD_SECRET_KEY=group.secret,
            STEAD_REAPER_INTERVAL_SECONDS="0.2",
        )
        locker = engine_of(group.url)
        try:
            with locker.begin() as conn:
                conn.execute(text("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE"))
                second = ServerProcess(tmp_path / "second", env=env, forker=forker).start()
                group.servers.append(second)
        finally:
            locker.dispose()
        with _client(second, group.key) as sdk, _client(first, group.key) as sdk_first:
            session_id = new_session(sdk)
            sdk.beta.sessions.events.send(session_id, events=[message("after the lock")])
            wait_idle(sdk_first, session_id)
        assert "Application startup failed" not in second.log_text()
    finally:
        group.close()
