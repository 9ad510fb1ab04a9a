"""A turn whose lease is taken away ends that turn only: the run is retried and
the server goes on running every other session's turns.

The test moves a running run's epoch on in the database (as another process
taking it over would) while the model is slow to answer; the turn's next lease
renewal finds it gone. On SQLite and on PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from stead.store.tables import runs
from stead.testing import Delay, FakeModel, FaultRule, ServeForker, ServerProcess, Text, Turn
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env, make_client, store_env
from tests.databases import BACKENDS, sqlite_url
from tests.databases import engine as engine_of
from tests.integration.helpers import lifespan_failed, message, new_session, wait_idle

WAIT = 30.0


def _answer(body: dict[str, Any]) -> Turn:
    return Turn([Text(f"answer {assistant_turns(body)}")])


def _slow_first(request: Any) -> bool:
    return "slow" in str(request.body.get("messages", ""))


@pytest.fixture(params=BACKENDS)
def served(
    request: pytest.FixtureRequest, tmp_path: Path, forker: ServeForker
) -> Iterator[tuple[ServerProcess, str]]:
    """A server whose first request about "slow" waits 4 s, and its database URL."""
    faults = [FaultRule(Delay(4.0), times=1, when=_slow_first)]
    with store_env(request) as extra, FakeModel(_answer, faults=faults) as fake:
        timers = {"STEAD_LEASE_SECONDS": "1.5", "STEAD_REAPER_INTERVAL_SECONDS": "0.2"}
        env = loop_env(fake, **extra, **timers, STEAD_SANDBOX="off")
        process = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        url = extra.get("STEAD_DATABASE_URL") or sqlite_url(tmp_path / "data")
        try:
            yield process, url
        finally:
            process.kill()


def test_a_lost_lease_ends_only_its_turn(served: tuple[ServerProcess, str]) -> None:
    server, url = served
    assert server.first_key, server.log_text()
    engine = engine_of(url)
    try:
        with make_client(server.url, server.first_key) as client:
            slow = new_session(client)
            client.beta.sessions.events.send(slow, events=[message("slow")])
            deadline = time.monotonic() + WAIT
            its_run = runs.c.session_id == slow
            with engine.begin() as conn:
                while conn.execute(select(runs.c.id).where(its_run)).first() is None:
                    assert time.monotonic() < deadline, "no run was claimed"
                    time.sleep(0.05)
                # Another owner took the run over: the turn's epoch is stale.
                conn.execute(update(runs).where(its_run).values(epoch=runs.c.epoch + 1))
            other = new_session(client)
            client.beta.sessions.events.send(other, events=[message("meanwhile")])
            wait_idle(client, other, timeout=WAIT)
            wait_idle(client, slow, timeout=WAIT)  # retried once its lease ran out
            answered = [e.type for e in client.beta.sessions.events.list(slow)]
            assert "agent.message" in answered, answered
        crashed = [line for line in server.log_text().splitlines() if lifespan_failed(line)]
        assert crashed == [], "the app's lifespan (and its runtime) ended"
        assert "lost the lease of run" in server.log_text()
    finally:
        engine.dispose()
