"""Sandbox hosts on several machines: two real sandbox hosts (own state, own uid
ranges, TCP listeners with one token, one shared blob directory) and two
``stead serve`` processes on one PostgreSQL, process A using host A and B host B.

* a turn B runs for a session whose sandbox is on host A runs on host A (the
  lease says so): the file an earlier turn wrote is there, host B has none;
* host A is SIGKILLed after a snapshot while B runs a command on it: the call
  follows the op ledger's rule for an unknown outcome (in doubt, not run
  again), the sandbox moves to host B with the snapshot's workspace, and the
  session goes on there; no event is lost or logged twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess, free_port
from tests.conftest import make_client
from tests.databases import PostgresRun
from tests.integration.brains import Brains
from tests.integration.helpers import check_order, message, new_session, wait_idle
from tests.sandbox.conftest import WAIT, bash_turn, requires_isolation, shell, workspace_on_host

pytestmark = [pytest.mark.postgres, requires_isolation]
TOKEN = "hosts-share-this-token"


@dataclass
class Cluster:
    hosts: tuple[HostProcess, HostProcess]
    servers: tuple[ServerProcess, ServerProcess]
    key: str
    session_id: str = ""

    def client(self, index: int) -> anthropic.Anthropic:
        return make_client(self.servers[index].url, self.key)


def _host(root: Path, name: str) -> HostProcess:
    listen = f"127.0.0.1:{free_port()}"
    env = {"STEAD_SANDBOX_HOST_LISTEN_TCP": listen, "STEAD_SANDBOX_HOST_TOKEN": TOKEN}
    return HostProcess(root / name, blob_url=f"file://{root / 'blobs'}", env=env).start()


@pytest.fixture(scope="module")
def cluster(
    postgres_run: PostgresRun, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("hosts")
    hosts = (_host(root, "host-a"), _host(root, "host-b"))
    with FakeModel(shell) as fake:
        brains = Brains(postgres_run, root / "brains", fake, forker)
        try:
            servers = tuple(
                brains.start(
                    **host.settings_env,
                    STEAD_SANDBOX_HOST_TOKEN=TOKEN,
                    # A host that does not answer is given up after one retry.
                    STEAD_UPSTREAM_RETRIES="1",
                    STEAD_RETRY_INITIAL_SECONDS="0.05",
                )
                for host in hosts
            )
            yield Cluster(hosts, (servers[0], servers[1]), brains.key)
        finally:
            brains.close()
            for host in hosts:
                host.stop()


def _events(client: anthropic.Anthropic, session_id: str) -> list[dict[str, Any]]:
    return [e.model_dump() for e in client.beta.sessions.events.list(session_id)]


def _lease(client: anthropic.Anthropic, session_id: str) -> dict[str, Any]:
    lease: dict[str, Any] = client.get(
        f"/v1/sessions/{session_id}/sandbox", cast_to=dict[str, Any]
    )["lease"]
    return lease


def _host_id(host: HostProcess) -> str:
    return str(host.call({"op": "ping"})["result"]["host_id"])


def test_a_turn_on_another_process_reaches_the_host_holding_the_sandbox(
    cluster: Cluster,
) -> None:
    host_a, host_b = cluster.hosts
    with cluster.client(0) as on_a, cluster.client(1) as on_b:
        cluster.session_id = session_id = new_session(on_a, [{"type": "agent_toolset_20260401"}])
        assert bash_turn(on_a, session_id, "echo kept > f; echo written") == "written"
        lease = _lease(on_b, session_id)
        assert (lease["host_id"], lease["placement"]) == (_host_id(host_a), 1)
        assert lease["host_address"].startswith("tcp://127.0.0.1:")

        assert bash_turn(on_b, session_id, "cat f") == "kept"
        assert _lease(on_b, session_id)["host_id"] == _host_id(host_a)
        assert "error" in host_b.call({"op": "status", "sandbox_id": session_id})
        assert (workspace_on_host(host_a, session_id) / "f").exists()


def test_a_lost_host_moves_the_sandbox_to_a_live_one_from_its_snapshot(
    cluster: Cluster,
) -> None:
    host_a, host_b = cluster.hosts
    session_id = cluster.session_id
    assert session_id, "runs after the test that makes the session"
    taken = host_a.call({"op": "snapshot", "sandbox_id": session_id})
    assert taken["result"]["snapshot"] is not None
    with cluster.client(1) as on_b:
        before = len(_events(on_b, session_id))
        on_b.beta.sessions.events.send(session_id, events=[message("$ echo late > g; sleep 600")])
        late = workspace_on_host(host_a, session_id) / "g"
        deadline = time.monotonic() + WAIT
        while not late.exists():  # the command runs on host A, through process B
            assert time.monotonic() < deadline, "the command never started on host A"
            time.sleep(0.05)
        host_a.kill()
        wait_idle(on_b, session_id, timeout=WAIT)

        added = _events(on_b, session_id)[before:]
        results = [e for e in added if e["type"] == "agent.tool_result"]
        assert len(results) == 1 and results[0]["is_error"]
        assert "may have run" in results[0]["content"][0]["text"]  # in doubt: never run twice
        lease = _lease(on_b, session_id)
        assert (lease["host_id"], lease["placement"]) == (_host_id(host_b), 2)

        # The workspace as the snapshot held it: what came after is lost with host A.
        assert bash_turn(on_b, session_id, "ls") == "f"
        assert bash_turn(on_b, session_id, "cat f") == "kept"
        events = _events(on_b, session_id)
        assert len({e["id"] for e in events}) == len(events)
        check_order(events, "after the host was lost")
