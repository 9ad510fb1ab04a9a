"""The sandbox host's own figures in ``/metrics``, parsed with
``prometheus_client``'s parser: wake and snapshot durations and egress requests
by decision, moving as a real sandbox wakes, reaches out and is destroyed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess, client_tls
from tests.conftest import sdk_of
from tests.sandbox.conftest import WAIT, bash_turn, requires_isolation, shell, tool_session

pytestmark = requires_isolation


@pytest.fixture(scope="module")
def served(
    host: HostProcess, tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    with FakeModel(shell) as fake:
        env = {
            "STEAD_UPSTREAM_BASE_URL": fake.url,
            "ANTHROPIC_API_KEY": "test-key-for-the-fake-model",
            "STEAD_SANDBOX_SWEEP_INTERVAL_SECONDS": "0.2",
            **host.settings_env,
        }
        server = ServerProcess(
            tmp_path_factory.mktemp("metrics") / "data", env=env, forker=forker
        ).start()
        yield server
        server.stop()


def scrape(server: ServerProcess) -> dict[str, float]:
    """Every sample of ``/metrics``, by name and labels."""
    assert server.first_key
    text = httpx2.get(
        f"{server.url}/metrics",
        headers={"x-api-key": server.first_key},
        timeout=30,
        verify=client_tls(),
    ).text
    return {
        sample.name + str(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict[str, float], name: str, **labels: str) -> float:
    return samples.get(name + str(sorted(labels.items())), 0.0)


def test_wakes_snapshots_and_egress_are_counted(served: ServerProcess) -> None:
    before = scrape(served)
    with sdk_of(served) as client:
        session_id = tool_session(client)
        assert bash_turn(client, session_id, "echo awake") == "awake"
        refused = bash_turn(
            client,
            session_id,
            "curl -sS -o /dev/null -w '%{http_code}' http://10.255.255.1/ || true",
        )
        assert "403" in refused
        woken = scrape(served)
        wakes = "stead_sandbox_wake_duration_seconds_count"
        assert value(woken, wakes) >= value(before, wakes) + 1
        assert value(woken, "stead_sandbox_wake_duration_seconds_bucket", le="+Inf") == value(
            woken, wakes
        )
        assert value(woken, "stead_egress_requests_total", decision="denied") >= (
            value(before, "stead_egress_requests_total", decision="denied") + 1
        )
        client.delete(f"/v1/sessions/{session_id}/sandbox", cast_to=object)
        snapshots = "stead_sandbox_snapshot_duration_seconds_count"
        deadline = time.monotonic() + WAIT
        while value(scrape(served), snapshots) <= value(before, snapshots):
            assert time.monotonic() < deadline, "no snapshot counted after the release"
            time.sleep(0.2)


def test_a_host_that_does_not_answer_shows_no_host_figures(
    tmp_path_factory: pytest.TempPathFactory,
    forker: ServeForker,
) -> None:
    env = {"STEAD_SANDBOX_HOST_AUTOSTART": "false"}
    server = ServerProcess(
        tmp_path_factory.mktemp("nohost") / "data", env=env, forker=forker
    ).start()
    try:
        samples = scrape(server)
    finally:
        server.stop()
    assert not any(name.startswith("stead_sandbox_wake") for name in samples)
    assert not any(name.startswith("stead_egress_requests") for name in samples)


def test_a_host_gone_away_leaves_no_sandbox_counts(
    tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> None:
    """The counts by state are the host's answer to this scrape: a host that
    stopped answering shows none, not the counts it had when it last answered."""
    root = tmp_path_factory.mktemp("gone")
    own = HostProcess(root / "state", forker=forker).start()
    try:
        with FakeModel(shell) as fake:
            env = {
                "STEAD_UPSTREAM_BASE_URL": fake.url,
                "ANTHROPIC_API_KEY": "test-key-for-the-fake-model",
                **own.settings_env,
            }
            server = ServerProcess(root / "data", env=env, forker=forker).start()
            try:
                with sdk_of(server) as client:
                    session_id = tool_session(client)
                    assert bash_turn(client, session_id, "echo here") == "here"
                held = scrape(server)
                assert sum(v for k, v in held.items() if k.startswith("stead_sandboxes[")) >= 1
                own.kill()
                gone = scrape(server)
            finally:
                server.stop()
    finally:
        own.stop()
    assert not [k for k, v in gone.items() if k.startswith("stead_sandboxes[") and v]
