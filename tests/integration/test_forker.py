"""Starting test servers: forked servers are processes of their own, and a port
another process took first is not mistaken for the server's."""

from __future__ import annotations

import json
import os
import select
import socket
from pathlib import Path

import httpx2
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls
from tests.conftest import loop_env


def test_a_forked_server_serves_dies_to_sigkill_and_restarts(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    server = ServerProcess(tmp_path / "data", env=loop_env(fake_model), forker=forker).start()
    try:
        assert server.first_key, server.log_text()
        answer = httpx2.get(
            f"{server.url}/v1/agents", headers={"x-api-key": server.first_key}, verify=client_tls()
        )
        assert answer.status_code == 200, answer.text
    finally:
        server.kill()
    assert server.wait_exit(timeout=0)
    again = ServerProcess(tmp_path / "data", env=loop_env(fake_model), forker=forker).start()
    again.stop()
    assert again.wait_exit(timeout=0)


def test_a_forked_command_runs_to_its_end_and_a_failing_one_says_why(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    server = ServerProcess(tmp_path / "data", env=loop_env(fake_model), forker=forker).start()
    try:
        key = server.create_key(new_workspace="forked")
        other = httpx2.get(
            f"{server.url}/v1/agents", headers={"x-api-key": key}, verify=client_tls()
        )
        assert other.status_code == 200, other.text
    finally:
        server.stop()
    env = {**os.environ, "STEAD_DATA_DIR": str(tmp_path / "data")}
    listed = json.loads(forker.run(("keys", "list", "--json"), env, timeout=60))
    assert key[-4:] in {k["ends_with"] for k in listed} and len(listed) == 2
    with pytest.raises(RuntimeError, match="no API key key_none"):
        forker.run(("keys", "revoke", "key_none"), env, timeout=60)
    # As subprocess.run(capture_output=True) gives it: the errors apart.
    refused = forker.complete(("keys", "revoke", "key_none"), env, timeout=60)
    assert refused.returncode == 1 and refused.stdout == ""
    assert "no API key key_none" in refused.stderr


def test_closing_the_forker_ends_the_servers_it_left(tmp_path: Path, fake_model: FakeModel) -> None:
    with ServeForker() as forker:
        server = ServerProcess(tmp_path / "data", env=loop_env(fake_model), forker=forker)
        server.start()
        pidfd = os.pidfd_open(server.pid)
    try:
        readable, _, _ = select.select([pidfd], [], [], 30)
        assert readable, "the server outlived its forker"
    finally:
        os.close(pidfd)


def test_a_port_taken_before_the_server_binds_it_is_retried(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = int(squatter.getsockname()[1])
        server = ServerProcess(tmp_path / "data", env=loop_env(fake_model), forker=forker)
        server.port, server.url = taken, f"http://127.0.0.1:{taken}"
        server.start()
        try:
            assert server.port != taken
            assert "address already in use" in server.log_text().lower()
            assert server.first_key
            answer = httpx2.get(
                f"{server.url}/v1/agents",
                headers={"x-api-key": server.first_key},
                verify=client_tls(),
            )
            assert answer.status_code == 200, answer.text
        finally:
            server.stop()
