"""``stead worker --sandbox``: a self-hosted environment's tools run in a stead
sandbox (bubblewrap, a uid of its own) from a local sandbox host, not as the
worker's user in its working directory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.conftest import loop_env, sdk_of
from tests.integration.helpers import kinds, until_idle
from tests.integration.test_agent_loop import say
from tests.integration.test_self_hosted import environment, scripted, session_on
from tests.sandbox.conftest import requires_isolation, workspace_on_host

pytestmark = requires_isolation
WAIT = 60.0


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    with FakeModel(scripted) as fake:
        process = ServerProcess(
            tmp_path_factory.mktemp("hosted"), env=loop_env(fake), forker=forker
        ).start()
        yield process
        process.stop()


def _worker(
    served: ServerProcess, host: HostProcess, env_id: str, key: str, tmp: Path
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "stead", "worker", "--sandbox", "--environment", env_id]
    command += ["--url", served.url, "--environment-key", key, "--workdir", str(tmp / "work")]
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
    with (tmp / "worker.log").open("wb") as out:
        return subprocess.Popen(
            [*command, "--max-idle", "1", "--data-dir", str(tmp / "worker-data")],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**inherited, **host.settings_env, "PYTHONUNBUFFERED": "1"},
        )


def test_a_turn_runs_its_tools_in_a_stead_sandbox(
    served: ServerProcess, tmp_path: Path, forker: ServeForker
) -> None:
    host = HostProcess(tmp_path / "host" / "state", forker=forker).start()
    try:
        with sdk_of(served) as sdk:
            env_id, key = environment(sdk)
            worker = _worker(served, host, env_id, key, tmp_path)
            try:
                session_id = session_on(sdk, env_id)
                with sdk.beta.sessions.events.stream(session_id) as stream:
                    sdk.beta.sessions.events.send(session_id, events=[say("tools please")])  # type: ignore[list-item]
                    events: list[Any] = until_idle(stream)
            finally:
                worker.terminate()
                worker.wait(timeout=WAIT)
        log = (tmp_path / "worker.log").read_text()
        results = [e for e in events if e.type == "user.tool_result"]
        assert len(results) == 6 and not any(r.is_error for r in results), log
        assert "agent.tool_result" not in kinds(events)
        assert "42" in results[3].content[0].text
        workspace = workspace_on_host(host, session_id)
        assert (workspace / "notes.txt").read_text() == "hello stead\n"
        assert (workspace / "notes.txt").stat().st_uid != 0  # the sandbox's own uid
        assert not (tmp_path / "work" / "notes.txt").exists()
    finally:
        host.stop()
