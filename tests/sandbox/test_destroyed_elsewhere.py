"""A sandbox destroyed by another process: two ``stead serve`` processes on one
PostgreSQL and one sandbox host. A runs the session's turns and never sweeps;
B sweeps. When the lease ends (released through B), B destroys the sandbox and
tells A, which lets go of what it held of it: its handle, the credentials it
gave it, its staging (``stead_sandboxes_served`` goes back to 0 on A). The
session's next turn on A gets a new sandbox with the workspace the destroy
snapshotted."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import anthropic
import pytest

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.conftest import make_client
from tests.databases import PostgresRun
from tests.integration.brains import Brains
from tests.integration.helpers import new_session
from tests.sandbox.conftest import bash_turn, requires_isolation, shell

pytestmark = [pytest.mark.postgres, requires_isolation]
SERVED = re.compile(r"^stead_sandboxes_served (\S+)$", re.MULTILINE)


@dataclass
class Pair:
    runner: ServerProcess
    sweeper: ServerProcess
    key: str


@pytest.fixture(scope="module")
def pair(
    postgres_run: PostgresRun, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("elsewhere")
    host = HostProcess(root / "host", forker=forker).start()
    with FakeModel(shell) as fake:
        brains = Brains(postgres_run, root / "brains", fake, forker)
        try:
            # The runner never sweeps: only the other process destroys sandboxes.
            runner = brains.start(**host.settings_env, STEAD_SANDBOX_SWEEP_INTERVAL_SECONDS="3600")
            sweeper = brains.start(**host.settings_env, STEAD_SANDBOX_SWEEP_INTERVAL_SECONDS="0.2")
            yield Pair(runner, sweeper, brains.key)
        finally:
            brains.close()
            host.stop()


def _served(client: anthropic.Anthropic) -> float:
    text = client.get("/metrics", cast_to=str)
    found = SERVED.search(text)
    assert found, text[:500]
    return float(found.group(1))


def _wait_served(client: anthropic.Anthropic, wanted: float) -> None:
    deadline = time.monotonic() + 60
    while (served := _served(client)) != wanted:
        assert time.monotonic() < deadline, f"stead_sandboxes_served stayed {served}"
        time.sleep(0.1)


def test_a_process_lets_go_of_a_sandbox_another_destroyed(pair: Pair) -> None:
    with (
        make_client(pair.runner.url, pair.key) as on_a,
        make_client(pair.sweeper.url, pair.key) as on_b,
    ):
        session_id = new_session(on_a, [{"type": "agent_toolset_20260401"}])
        assert bash_turn(on_a, session_id, "echo kept > f; echo written") == "written"
        assert _served(on_a) == 1

        on_b.delete(f"/v1/sessions/{session_id}/sandbox", cast_to=object)  # the lease ends
        _wait_served(on_a, 0)  # B destroyed it; A let go when B said so
        lease = on_b.get(f"/v1/sessions/{session_id}/sandbox", cast_to=dict[str, object])
        assert lease["lease"]["status"] == "destroyed"  # type: ignore[index]
        assert _served(on_b) == 0  # B never served it

        assert bash_turn(on_a, session_id, "cat f") == "kept"
        assert _served(on_a) == 1
