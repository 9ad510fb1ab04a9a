"""Self-hosted environments through the official SDK against a real server: the
work API's calls and errors, and sessions whose tools run in ``stead worker``
(the SDK's ``EnvironmentWorker``) instead of a stead sandbox."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.lib.environments._worker import _sessions_token_from_secret

from stead.testing import FakeModel, ServeForker, ServerProcess, Text, ToolCall, Turn
from stead.testing.forker import ForkedServer
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env, make_client, sdk_of, store_env
from tests.databases import BACKENDS, PostgresRun
from tests.integration.brains import Brains
from tests.integration.helpers import kinds, until_idle
from tests.integration.loop_scenarios import SCENARIOS, first_user_text
from tests.integration.test_agent_loop import say

Json = dict[str, Any]
WAIT = 40.0

SELF_HOSTED = {
    **SCENARIOS,
    "once": [
        Turn([ToolCall("bash", {"command": "echo ran >> count.txt; sleep 20"})]),
        Turn([Text("done")]),
    ],
    "brief": [
        Turn(
            [ToolCall("bash", {"command": "echo ran >> count.txt; sleep 2; echo end >> count.txt"})]
        ),
        Turn([Text("done")]),
    ],
    "environ": [
        Turn([ToolCall("bash", {"command": "env; cat /proc/self/environ"})]),
        Turn([Text("done")]),
    ],
    "twice": [
        Turn([ToolCall("bash", {"command": "true"})]),
        Turn([Text("done")]),
        Turn([ToolCall("bash", {"command": "echo again"})]),
        Turn([Text("done")]),
    ],
}


def scripted(body: Json) -> Turn:
    words = first_user_text(body).split()
    turns = SELF_HOSTED.get(words[0] if words else "")
    step = assistant_turns(body)
    if turns is None or step >= len(turns):
        return Turn([Text("done")])
    return turns[step]


@pytest.fixture(scope="module", params=BACKENDS)
def hosted(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    """A server on each store: the work queue's fenced claims and leases are
    row-locked writes on PostgreSQL, serialised ones on SQLite."""
    with store_env(request) as extra, FakeModel(scripted) as fake:
        env = loop_env(fake, STEAD_WORK_LEASE_SECONDS="2", **extra)
        process = ServerProcess(tmp_path_factory.mktemp("hosted"), env=env, forker=forker).start()
        yield process
        process.stop()


@pytest.fixture
def sdk(hosted: ServerProcess) -> Iterator[anthropic.Anthropic]:
    with sdk_of(hosted) as client:
        yield client


def environment(sdk: anthropic.Anthropic) -> tuple[str, str]:
    """A new self-hosted environment and a key for it."""
    env = sdk.beta.environments.create(
        name=f"mine-{uuid.uuid4().hex[:8]}", config={"type": "self_hosted"}
    )
    made = sdk.post(f"/v1/environments/{env.id}/keys", cast_to=object, body={})
    assert isinstance(made, dict)
    return env.id, str(made["key"])


def session_on(sdk: anthropic.Anthropic, env_id: str, tools: bool = True) -> str:
    agent = sdk.beta.agents.create(
        name="hosted",
        model="claude-sonnet-4-6",
        tools=[{"type": "agent_toolset_20260401"}] if tools else [],  # type: ignore[list-item]
    )
    return sdk.beta.sessions.create(agent=agent.id, environment_id=env_id).id


def eventually(check: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_work_api_through_the_sdk(sdk: anthropic.Anthropic, hosted: ServerProcess) -> None:
    env_id, key = environment(sdk)
    with make_client(hosted.url, key) as worker:
        work = worker.beta.environments.work
        assert work.poll(env_id) is None
        session_id = session_on(sdk, env_id, tools=False)
        sdk.beta.sessions.events.send(session_id, events=[say("hello")])  # type: ignore[list-item]
        item = eventually(lambda: work.poll(env_id, block_ms=999), "a work item")
        assert item.state == "queued" and item.data.id == session_id and item.secret
        assert work.ack(item.id, environment_id=env_id).state == "starting"
        beat = work.heartbeat(
            item.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT"
        )
        assert beat.state == "active" and beat.lease_extended and beat.ttl_seconds == 2
        # A second claim of the same item is refused with the lease as it stands.
        with pytest.raises(anthropic.APIStatusError) as refused:
            work.heartbeat(item.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
        assert refused.value.status_code == 412
        body = refused.value.body
        assert isinstance(body, dict)
        details = body["error"]["details"]
        assert details["error_code"] == "heartbeat_precondition_failed"
        assert details["current_state"]["last_heartbeat"] == beat.last_heartbeat
        again = work.heartbeat(
            item.id,
            environment_id=env_id,
            expected_last_heartbeat=beat.last_heartbeat,
            desired_ttl_seconds=30,
        )
        assert again.ttl_seconds == 30
        assert [w.id for w in work.list(env_id)] == [item.id]
    work = sdk.beta.environments.work
    assert work.retrieve(item.id, environment_id=env_id).secret is None
    updated = work.update(item.id, environment_id=env_id, metadata={"host": "laptop"})
    assert updated.metadata == {"host": "laptop"}
    stats = work.stats(env_id)
    assert (stats.depth, stats.pending, stats.workers_polling) == (0, 0, 1)
    assert work.stop(item.id, environment_id=env_id, force=True).state == "stopped"
    with pytest.raises(anthropic.ConflictError):
        work.stop(item.id, environment_id=env_id, force=True)


def test_bad_input_gets_the_api_errors(sdk: anthropic.Anthropic, hosted: ServerProcess) -> None:
    env_id, key = environment(sdk)
    other_id, other_key = environment(sdk)
    with make_client(hosted.url, key) as worker, make_client(hosted.url, other_key) as stranger:
        wrong = make_client(hosted.url, "sk-stead-env-wrong")
        with wrong, pytest.raises(anthropic.AuthenticationError):
            wrong.beta.environments.work.poll(env_id)
        with pytest.raises(anthropic.PermissionDeniedError):
            stranger.beta.environments.work.poll(env_id)
        with pytest.raises(anthropic.PermissionDeniedError):
            sdk.beta.environments.work.list(env_id)
        with pytest.raises(anthropic.NotFoundError):
            worker.beta.environments.work.ack("work_unknown", environment_id=env_id)
        for bad in ({"block_ms": 0}, {"block_ms": 1000}, {"reclaim_older_than_ms": -1}):
            with pytest.raises(anthropic.BadRequestError) as caught:
                worker.beta.environments.work.poll(env_id, **bad)  # type: ignore[arg-type]
            assert next(iter(bad)) in caught.value.message
        with pytest.raises(anthropic.BadRequestError):
            worker.beta.environments.work.heartbeat(
                "work_x", environment_id=env_id, desired_ttl_seconds=0
            )
        assert other_id != env_id


def start_worker(
    forker: ServeForker, hosted: ServerProcess, env_id: str, key: str, workdir: Path, log: Path
) -> ForkedServer:
    """``stead worker`` for the environment, forked (the anthropic SDK it runs on
    is a second of imports for a fresh interpreter)."""
    command = ("worker", "--environment", env_id, "--url", hosted.url, "--environment-key", key)
    command += ("--workdir", str(workdir), "--max-idle", "1")
    return forker.fork(dict(os.environ), log, command)


def _turn_served_by(sdk: anthropic.Anthropic, env_id: str, worker: Any, text: str) -> list[Any]:
    """The events of a new session's turn on ``text``, its calls run by
    ``worker`` (a ``stead worker``), which is stopped after."""
    try:
        session_id = session_on(sdk, env_id)
        with sdk.beta.sessions.events.stream(session_id) as stream:
            sdk.beta.sessions.events.send(session_id, events=[say(text)])  # type: ignore[list-item]
            return until_idle(stream)
    finally:
        worker.terminate()
        worker.wait(timeout=WAIT)


def test_a_multi_tool_turn_runs_in_stead_worker(
    sdk: anthropic.Anthropic, hosted: ServerProcess, tmp_path: Path, forker: ServeForker
) -> None:
    env_id, key = environment(sdk)
    worker = start_worker(forker, hosted, env_id, key, tmp_path / "work", tmp_path / "worker.log")
    events = _turn_served_by(sdk, env_id, worker, "tools please")
    seen = kinds(events)
    assert seen.count("user.tool_result") == 6, (tmp_path / "worker.log").read_text()
    assert "agent.tool_result" not in seen
    assert events[-1].stop_reason.type == "end_turn"
    assert (tmp_path / "work" / "notes.txt").read_text() == "hello stead\n"
    bash = [e for e in events if e.type == "user.tool_result"][3]
    assert "42" in bash.content[0].text


def test_the_worker_s_credentials_stay_out_of_its_commands(
    sdk: anthropic.Anthropic, hosted: ServerProcess, tmp_path: Path, forker: ServeForker
) -> None:
    """A key given in ``STEAD_ENVIRONMENT_KEY`` (or ``STEAD_API_KEY``) is the
    worker's: the agent's commands do not get it in their environment."""
    env_id, key = environment(sdk)
    assert hosted.first_key is not None
    command = ("worker", "--environment", env_id, "--url", hosted.url)
    command += ("--workdir", str(tmp_path / "work"), "--max-idle", "1")
    given = {**os.environ, "STEAD_ENVIRONMENT_KEY": key, "STEAD_API_KEY": hosted.first_key}
    worker = forker.fork(given, tmp_path / "worker.log", command)
    events = _turn_served_by(sdk, env_id, worker, "environ")
    results = [e for e in events if e.type == "user.tool_result"]
    assert len(results) == 1, (tmp_path / "worker.log").read_text()
    seen = results[0].content[0].text
    assert "PATH=" in seen
    assert key not in seen and hosted.first_key not in seen


def test_a_killed_worker_loses_its_item_and_bash_runs_once(
    sdk: anthropic.Anthropic, hosted: ServerProcess, tmp_path: Path, forker: ServeForker
) -> None:
    env_id, key = environment(sdk)
    workdir = tmp_path / "shared"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    workers = [start_worker(forker, hosted, env_id, key, workdir, log) for log in logs]
    try:
        session_id = session_on(sdk, env_id)
        with sdk.beta.sessions.events.stream(session_id) as stream:
            sdk.beta.sessions.events.send(session_id, events=[say("once")])  # type: ignore[list-item]
            eventually(lambda: (workdir / "count.txt").exists(), "the bash call to run")
            claimed = [i for i, log in enumerate(logs) if "claimed work" in log.read_text()]
            assert len(claimed) == 1, "each item is claimed by one worker"
            workers[claimed[0]].send_signal(signal.SIGKILL)
            events = until_idle(stream)
    finally:
        for process in workers:
            process.kill()
            process.wait(timeout=WAIT)
    results = [e for e in events if e.type == "user.tool_result"]
    assert len(results) == 1 and results[0].is_error
    assert "may have run" in results[0].content[0].text
    assert (workdir / "count.txt").read_text() == "ran\n"
    assert events[-1].stop_reason.type == "end_turn"


def test_a_result_reported_twice_is_recorded_once(
    sdk: anthropic.Anthropic, hosted: ServerProcess
) -> None:
    """A worker that retries its post (it timed out, its answer was kept) does
    not answer the call twice: the second report is echoed, not logged."""
    env_id, key = environment(sdk)
    session_id = session_on(sdk, env_id)
    sdk.beta.sessions.events.send(session_id, events=[say("once twice")])  # type: ignore[list-item]
    with make_client(hosted.url, key) as worker:
        work = worker.beta.environments.work
        item = eventually(lambda: work.poll(env_id, block_ms=999), "a work item")
        work.ack(item.id, environment_id=env_id)
        work.heartbeat(item.id, environment_id=env_id, expected_last_heartbeat="NO_HEARTBEAT")
    use = eventually(
        lambda: next(
            (e for e in sdk.beta.sessions.events.list(session_id) if e.type == "agent.tool_use"),
            None,
        ),
        "the bash call",
    )
    answer = {
        "type": "user.tool_result",
        "tool_use_id": use.id,
        "content": [{"type": "text", "text": "ran once"}],
    }
    token = _sessions_token_from_secret(item.secret)
    assert token is not None
    with make_client(hosted.url, token) as session_client:
        for _ in range(2):
            session_client.beta.sessions.events.send(session_id, events=[answer])  # type: ignore[list-item]
        # The token reads its session and sends its events; nothing more.
        assert session_client.beta.sessions.retrieve(session_id).id == session_id
        for change in (
            lambda: session_client.beta.sessions.update(session_id, title="taken"),
            lambda: session_client.beta.sessions.archive(session_id),
            lambda: session_client.beta.sessions.delete(session_id),
        ):
            with pytest.raises(anthropic.PermissionDeniedError, match="sessions token"):
                change()
    eventually(
        lambda: sdk.beta.sessions.retrieve(session_id).status == "idle" or None, "the turn's end"
    )
    events = list(sdk.beta.sessions.events.list(session_id))
    answers = [e for e in events if e.type == "user.tool_result" and e.tool_use_id == use.id]
    assert len(answers) == 1
    assert events[-1].type == "session.status_idle" and events[-1].stop_reason.type == "end_turn"


def _hold(work: Any, env_id: str) -> Any:
    """The environment's next item, polled, acked and claimed with a long lease."""
    item = eventually(lambda: work.poll(env_id, block_ms=999), "a work item")
    work.ack(item.id, environment_id=env_id)
    work.heartbeat(
        item.id,
        environment_id=env_id,
        expected_last_heartbeat="NO_HEARTBEAT",
        desired_ttl_seconds=600,
    )
    return item


def _results(sdk: anthropic.Anthropic, session_id: str) -> list[Any]:
    return [e for e in sdk.beta.sessions.events.list(session_id) if e.type == "user.tool_result"]


def _a_held_call(sdk: anthropic.Anthropic, url: str) -> tuple[str, str, str, Any]:
    """A session whose turn's bash call a worker holds (it may have started it):
    the environment's id and key, the session's id, the held item."""
    env_id, key = environment(sdk)
    session_id = session_on(sdk, env_id)
    sdk.beta.sessions.events.send(session_id, events=[say("once")])  # type: ignore[list-item]
    with make_client(url, key) as worker:
        item = _hold(worker.beta.environments.work, env_id)
    eventually(
        lambda: any(e.type == "agent.tool_use" for e in sdk.beta.sessions.events.list(session_id)),
        "the bash call",
    )
    return env_id, key, session_id, item


def test_an_item_stopped_while_its_call_waits_leaves_no_call_stranded(
    sdk: anthropic.Anthropic, hosted: ServerProcess
) -> None:
    """Force-stopped while its worker runs a call (the worker can answer no
    more): the call is answered as in doubt and the turn goes on, instead of
    waiting out the answer timeout."""
    env_id, _, session_id, item = _a_held_call(sdk, hosted.url)
    sdk.beta.environments.work.stop(item.id, environment_id=env_id, force=True)
    eventually(lambda: sdk.beta.sessions.retrieve(session_id).status == "idle", "the turn's end")
    [answer] = _results(sdk, session_id)
    assert answer.is_error and "may have run" in answer.content[0].text  # type: ignore[union-attr]


def test_a_stopping_item_keeps_its_session_s_calls_from_a_second_worker(
    sdk: anthropic.Anthropic, hosted: ServerProcess
) -> None:
    """Asked to stop, its worker may still run what the session asks: no item is
    queued beside it (a second worker would run the same call); once it stopped,
    what it may have run is answered as in doubt."""
    env_id, key = environment(sdk)
    session_id = session_on(sdk, env_id)

    def uses() -> list[Any]:
        return [e for e in sdk.beta.sessions.events.list(session_id) if e.type == "agent.tool_use"]

    sdk.beta.sessions.events.send(session_id, events=[say("twice")])  # type: ignore[list-item]
    with make_client(hosted.url, key) as worker:
        item = _hold(worker.beta.environments.work, env_id)
        [first] = eventually(uses, "the first call")
        token = _sessions_token_from_secret(item.secret)
        assert token is not None
        with make_client(hosted.url, token) as session_client:
            ran = {"type": "user.tool_result", "tool_use_id": first.id, "content": []}
            session_client.beta.sessions.events.send(session_id, events=[ran])  # type: ignore[list-item]
        eventually(lambda: sdk.beta.sessions.retrieve(session_id).status == "idle", "turn one")
        sdk.beta.environments.work.stop(item.id, environment_id=env_id)
        sdk.beta.sessions.events.send(session_id, events=[say("again")])  # type: ignore[list-item]
        eventually(lambda: len(uses()) == 2, "the second call")
        listed = worker.beta.environments.work.list(env_id)
        assert [(i.id, i.state) for i in listed] == [(item.id, "stopping")]
        # The worker's own stop as it leaves (what the SDK's worker sends).
        worker.beta.environments.work.stop(item.id, environment_id=env_id, force=True)
        eventually(lambda: sdk.beta.sessions.retrieve(session_id).status == "idle", "turn two")
        assert [i.state for i in worker.beta.environments.work.list(env_id)] == ["stopped"]
    *_, answer = _results(sdk, session_id)
    assert "may have run" in answer.content[0].text  # type: ignore[union-attr]


def test_revoking_a_key_ends_the_claims_it_made(
    sdk: anthropic.Anthropic, hosted: ServerProcess
) -> None:
    """A worker whose key is revoked while it holds a session (a machine taken
    out of service, or one that is not trusted any more) loses it at once: its
    sessions token reads and sends nothing more, its heartbeat is refused, and
    another worker takes the item, the call it may have started answered as in
    doubt. Before, the token worked on for as long as the worker heartbeat."""
    env_id, _ = environment(sdk)
    keys = [sdk.post(f"/v1/environments/{env_id}/keys", cast_to=object, body={}) for _ in "ab"]
    revoked, kept = [k for k in keys if isinstance(k, dict)]
    session_id = session_on(sdk, env_id)
    sdk.beta.sessions.events.send(session_id, events=[say("once")])  # type: ignore[list-item]
    with make_client(hosted.url, str(revoked["key"])) as worker:
        item = _hold(worker.beta.environments.work, env_id)
    eventually(
        lambda: any(e.type == "agent.tool_use" for e in sdk.beta.sessions.events.list(session_id)),
        "the bash call",
    )
    token = _sessions_token_from_secret(item.secret)
    assert token is not None
    sdk.post(f"/v1/environments/{env_id}/keys/{revoked['id']}/revoke", cast_to=object, body={})
    with make_client(hosted.url, token) as session_client:
        with pytest.raises(anthropic.AuthenticationError):
            session_client.beta.sessions.retrieve(session_id)
        with pytest.raises(anthropic.APIStatusError) as refused:
            session_client.beta.environments.work.heartbeat(item.id, environment_id=env_id)
        assert refused.value.status_code == 412
    with make_client(hosted.url, str(kept["key"])) as other:
        taken = eventually(
            lambda: other.beta.environments.work.poll(env_id, block_ms=999), "the item again"
        )
    assert taken.id == item.id
    [answer] = _results(sdk, session_id)
    assert answer.is_error and "may have run" in answer.content[0].text  # type: ignore[union-attr]


def test_archiving_a_session_stops_its_work(
    sdk: anthropic.Anthropic, hosted: ServerProcess
) -> None:
    env_id, key = environment(sdk)
    session_id = session_on(sdk, env_id)
    sdk.beta.sessions.events.send(session_id, events=[say("once")])  # type: ignore[list-item]
    eventually(
        lambda: any(e.type == "agent.tool_use" for e in sdk.beta.sessions.events.list(session_id)),
        "the bash call",
    )
    sdk.beta.sessions.events.send(session_id, events=[{"type": "user.interrupt"}])  # type: ignore[list-item]
    eventually(lambda: sdk.beta.sessions.retrieve(session_id).status == "idle", "the interrupt")
    sdk.beta.sessions.archive(session_id)
    with make_client(hosted.url, key) as worker:
        assert [i.state for i in worker.beta.environments.work.list(env_id)] == ["stopped"]
        assert worker.beta.environments.work.poll(env_id) is None


@pytest.mark.postgres
def test_a_stop_whose_process_dies_before_its_follow_up_strands_no_call(
    postgres_run: PostgresRun, tmp_path: Path, forker: ServeForker
) -> None:
    """Two processes: the turn runs on one, the worker's force-stop goes to the
    other, which dies once the stop is committed, before it answered the call
    the worker may have started. The turn's process finds its session with no
    live item and does it: the call is answered as in doubt and the turn ends,
    instead of waiting out the answer timeout (an hour)."""
    with FakeModel(scripted) as fake:
        group = Brains(postgres_run, tmp_path / "brains", fake, forker)
        try:
            survivor = group.start(STEAD_WORK_LEASE_SECONDS="2")
            doomed = group.start(STEAD_FAILPOINTS="work.after_stop:1")
            with make_client(survivor.url, group.key) as sdk:
                env_id, _, session_id, item = _a_held_call(sdk, survivor.url)
                with (
                    make_client(doomed.url, group.key) as sdk_doomed,
                    pytest.raises(anthropic.APIConnectionError),
                ):
                    sdk_doomed.beta.environments.work.stop(
                        item.id, environment_id=env_id, force=True
                    )
                assert doomed.wait_exit(30), "the failpoint did not fire"
                eventually(
                    lambda: sdk.beta.sessions.retrieve(session_id).status == "idle",
                    "the turn's end",
                )
                [answer] = _results(sdk, session_id)
        finally:
            group.close()
    assert answer.is_error and "may have run" in answer.content[0].text  # type: ignore[union-attr]


def test_a_turn_retaken_after_its_stop_s_process_died_runs_no_call_twice(
    tmp_path: Path, forker: ServeForker
) -> None:
    """SQLite, one process: it runs the turn and takes the worker's force-stop,
    then dies once the stop is committed, before it answered the call the
    worker may have started. Restarted, it retakes the turn, which queues a
    fresh item: the call must be answered as in doubt first, or the fresh
    item's worker runs it again."""
    with FakeModel(scripted) as fake:
        doomed = ServerProcess(
            tmp_path / "data",
            env=loop_env(fake, STEAD_FAILPOINTS="work.after_stop:1"),
            forker=forker,
        ).start()
        with sdk_of(doomed) as sdk:
            env_id, key, session_id, item = _a_held_call(sdk, doomed.url)
            with pytest.raises(anthropic.APIConnectionError):
                sdk.beta.environments.work.stop(item.id, environment_id=env_id, force=True)
        assert doomed.wait_exit(30), "the failpoint did not fire"
        doomed.kill()
        restarted = ServerProcess(tmp_path / "data", env=loop_env(fake), forker=forker).start()
        restarted.first_key = doomed.first_key
        try:
            with sdk_of(restarted) as sdk, make_client(restarted.url, key) as worker:
                fresh = eventually(
                    lambda: worker.beta.environments.work.poll(env_id, block_ms=999),
                    "the retaken turn's item",
                )
                # Handed to a worker only once the call the stopped worker may
                # have started is answered: else the new worker runs it again.
                answered = _results(sdk, session_id)
                eventually(
                    lambda: sdk.beta.sessions.retrieve(session_id).status == "idle",
                    "the turn's end",
                )
                [answer] = _results(sdk, session_id)
        finally:
            restarted.stop()
    assert fresh.id != item.id
    assert [a.id for a in answered] == [answer.id]
    assert answer.is_error and "may have run" in answer.content[0].text  # type: ignore[union-attr]


def test_a_refused_key_ends_the_worker_with_one_line(
    sdk: anthropic.Anthropic, hosted: ServerProcess, tmp_path: Path, forker: ServeForker
) -> None:
    """A key revoked while the worker polls, or one of another environment,
    ends ``stead worker`` with the server's reason on one line, not a traceback."""
    env_id, _ = environment(sdk)
    made = sdk.post(f"/v1/environments/{env_id}/keys", cast_to=object, body={})
    assert isinstance(made, dict)
    log = tmp_path / "revoked.log"
    worker = start_worker(forker, hosted, env_id, str(made["key"]), tmp_path / "work", log)
    try:
        eventually(lambda: log.exists() and "poll" in log.read_text(), "the worker to poll")
        sdk.post(f"/v1/environments/{env_id}/keys/{made['id']}/revoke", cast_to=object, body={})
        assert worker.wait(timeout=WAIT) == 2
    finally:
        worker.kill()
    said = log.read_text()
    assert "Traceback" not in said and "│" not in said, said
    assert "stead: the server refused the worker (401): invalid or revoked environment key" in said
    other_id, other_key = environment(sdk)
    command = ("worker", "--environment", env_id, "--url", hosted.url)
    stranger = forker.complete((*command, "--environment-key", other_key), dict(os.environ), WAIT)
    assert stranger.returncode == 2
    assert "Traceback" not in stranger.stdout + stranger.stderr
    assert "refused the worker (403): this environment key is for another environment" in (
        stranger.stdout + stranger.stderr
    ).replace("\n", " ")
    assert other_id != env_id
    # A working directory that cannot be one: one line too (before, a traceback).
    taken = tmp_path / "a-file"
    taken.write_text("")
    given = ("--environment-key", other_key, "--workdir", str(taken))
    filed = forker.complete((*command, *given), dict(os.environ), WAIT)
    assert filed.returncode == 2 and "Traceback" not in filed.stdout + filed.stderr
    assert f"stead: --workdir {taken}: File exists" in (filed.stdout + filed.stderr).replace(
        "\n", ""
    )


def _running_in(workdir: Path) -> list[int]:
    """The processes whose working directory is ``workdir``."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == workdir:
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_terminated_worker_answers_its_call_and_leaves_no_command_running(
    sdk: anthropic.Anthropic, hosted: ServerProcess, tmp_path: Path, forker: ServeForker
) -> None:
    """SIGTERM mid-call: the worker lets the call finish, answers it, stops its
    item and exits 143, as on Ctrl-C; the command is not left running, orphaned,
    with its session waiting out the lease to hear it "may have run"."""
    env_id, key = environment(sdk)
    workdir = (tmp_path / "work").resolve()
    worker = start_worker(forker, hosted, env_id, key, workdir, tmp_path / "worker.log")
    try:
        session_id = session_on(sdk, env_id)
        with sdk.beta.sessions.events.stream(session_id) as stream:
            sdk.beta.sessions.events.send(session_id, events=[say("brief")])  # type: ignore[list-item]
            eventually(lambda: (workdir / "count.txt").exists(), "the bash call to run")
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=WAIT) == 143
            assert _running_in(workdir) == []
            events = until_idle(stream)
    finally:
        worker.kill()
    results = [e for e in events if e.type == "user.tool_result"]
    assert len(results) == 1 and not results[0].is_error
    assert (workdir / "count.txt").read_text() == "ran\nend\n"
    assert "Traceback" not in (tmp_path / "worker.log").read_text()
