"""``stead usage`` as a new user runs it: a fresh data directory, one scripted
turn of known token counts through a real ``stead serve``, then the command in
a subprocess, in JSON and as tables.

The turn makes two model requests on ``claude-sonnet-4-6`` (a bash call:
100,000 in, 10,000 out, 20,000 cache writes; the answer: 50,000 in, 2,000 out,
20,000 cache reads), 71 cents in all (``test_usage_budget.py`` works it out).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, Text, Turn
from tests.conftest import loop_env, sdk_of
from tests.integration.helpers import message, wait_idle
from tests.integration.test_usage_budget import MODEL, script


@pytest.fixture(scope="module")
def turned(
    tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[tuple[Path, str, str]]:
    """A data directory after one turn: (its path, the agent's id, the session's id)."""
    data = tmp_path_factory.mktemp("usage-cli")
    with FakeModel(script) as fake:
        server = ServerProcess(data, env=loop_env(fake), forker=forker).start()
        try:
            with sdk_of(server) as sdk:
                agent = sdk.beta.agents.create(
                    name="u", model=MODEL, tools=[{"type": "agent_toolset_20260401"}]
                )
                env = sdk.beta.environments.create(name=f"u-{uuid.uuid4().hex[:8]}")
                session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
                sdk.beta.sessions.events.send(session.id, events=[message("count this")])
                wait_idle(sdk, session.id)
        finally:
            server.stop()
    yield data, agent.id, session.id


def stead(forker: ServeForker, *args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STEAD_DATA_DIR": str(data_dir), "COLUMNS": "200"}
    env.pop("STEAD_DATABASE_URL", None)
    return forker.complete(args, env, 60)


def test_json_totals_the_turn_by_every_grouping(
    turned: tuple[Path, str, str], forker: ServeForker
) -> None:
    data, agent_id, session_id = turned
    done = stead(forker, "usage", "--json", data_dir=data)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    total = report["total"]
    assert (total["requests"], total["input_tokens"], total["output_tokens"]) == (
        2,
        150_000,
        12_000,
    )
    assert total["cache_read_input_tokens"] == 20_000
    assert total["cache_creation"]["ephemeral_5m_input_tokens"] == 20_000
    assert total["list_cost"] == {"amount": "71", "currency": "USD"}
    by = report["by"]
    assert set(by) == {"workspace", "agent", "session", "model", "day"}
    assert [row["agent"] for row in by["agent"]] == [agent_id]
    assert [row["session"] for row in by["session"]] == [session_id]
    assert len(by["workspace"]) == len(by["day"]) == 1
    model = next(row for row in by["model"] if row["model"] == MODEL)
    assert (model["requests"], model["list_cost"]["amount"]) == (2, "71")
    # The bash call woke the sandbox: its time is a row of its own, with no model.
    assert {row["model"] for row in by["model"]} <= {MODEL, "(sandbox time)"}


def test_tables_show_the_same_figures(turned: tuple[Path, str, str], forker: ServeForker) -> None:
    data, agent_id, _ = turned
    done = stead(forker, "usage", "--by", "agent", "--by", "model", data_dir=data)
    assert done.returncode == 0, done.stderr
    assert "by agent" in done.stdout and "by model" in done.stdout
    assert "by day" not in done.stdout
    assert agent_id in done.stdout and MODEL in done.stdout
    assert "150,000" in done.stdout and "$0.71" in done.stdout


def test_a_day_range_without_usage_totals_zero(
    turned: tuple[Path, str, str], forker: ServeForker
) -> None:
    data, _, _ = turned
    done = stead(
        forker, "usage", "--json", "--from", "2001-01-01", "--to", "2001-01-31", data_dir=data
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["total"]["requests"] == 0
    assert report["by"]["session"] == []
    # The default 30 days before the first day there is: before, an OverflowError.
    done = stead(forker, "usage", "--json", "--to", "0001-01-05", data_dir=data)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["from"] == "0001-01-01"
    # Before, a workspace id nobody has printed empty tables.
    done = stead(forker, "usage", "--workspace", "wrkspc_nobody", data_dir=data)
    assert done.returncode == 1
    assert done.stderr == f"stead: --workspace: no workspace with id 'wrkspc_nobody' in {data}\n"


def test_a_deleted_sessions_tokens_are_not_shown_as_sandbox_time(
    tmp_path: Path, forker: ServeForker
) -> None:
    usage = {"input_tokens": 1_000, "output_tokens": 100}
    with FakeModel(lambda body: Turn([Text("done")], usage=usage)) as fake:
        server = ServerProcess(tmp_path, env=loop_env(fake), forker=forker).start()
        try:
            with sdk_of(server) as sdk:
                agent = sdk.beta.agents.create(name="u", model=MODEL)
                env = sdk.beta.environments.create(name="gone")
                session = sdk.beta.sessions.create(agent=agent.id, environment_id=env.id)
                sdk.beta.sessions.events.send(session.id, events=[message("count this")])
                wait_idle(sdk, session.id)
                sdk.beta.sessions.delete(session.id)
        finally:
            server.stop()
    done = stead(forker, "usage", "--json", "--by", "agent", data_dir=tmp_path)
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["by"]["agent"]
    # The tokens are a model's, not sandbox time: the session's agent is unknown.
    assert (row["agent"], row["input_tokens"]) == ("(deleted session)", 1_000)


def test_mistakes_get_one_line_and_no_database_is_made(tmp_path: Path, forker: ServeForker) -> None:
    empty = tmp_path / "nothing-here"
    done = stead(forker, "usage", data_dir=empty)
    assert done.returncode == 1
    assert "no stead database" in done.stderr
    assert not (empty / "stead.db").exists()
    for args in (
        ("--from", "yesterday"),
        ("--by", "colour"),
        ("--from", "2026-02-02", "--to", "2026-02-01"),
    ):
        done = stead(forker, "usage", *args, data_dir=empty)
        assert done.returncode == 2, args
        assert done.stderr.startswith("stead: ") and "Traceback" not in done.stderr
