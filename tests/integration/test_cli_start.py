"""``stead serve`` started as a new user would, failing the ways a first start
fails: each stops with one line, and none spends the shown-once first key."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from stead.testing import FakeModel, ServeForker, ServerProcess, free_port
from tests.conftest import loop_env

START_TIMEOUT = 60.0


def _serve(data_dir: Path, port: int, fake: FakeModel) -> subprocess.CompletedProcess[str]:
    """``stead serve`` expected to stop by itself (it cannot start)."""
    command = [sys.executable, "-m", "stead", "serve", "--data-dir", str(data_dir)]
    return subprocess.run(
        [*command, "--port", str(port)],
        env={**loop_env(fake), "STEAD_SANDBOX": "off", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )


def test_a_taken_port_stops_start_up_before_the_first_key_is_made(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        failed = _serve(tmp_path / "data", port, fake_model)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == [
        f"stead: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(another server uses it? pick one with --port or STEAD_PORT)"
    ]
    assert "sk-stead-" not in failed.stdout
    started = ServerProcess(tmp_path / "data", env=loop_env(fake_model), forker=forker).start()
    try:
        assert started.first_key is not None  # the next start still shows it
    finally:
        started.stop()


def test_a_second_server_on_one_data_directory_stops_with_one_line(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    first = ServerProcess(tmp_path / "data", env=loop_env(fake_model), forker=forker).start()
    try:
        second = _serve(tmp_path / "data", free_port(), fake_model)
    finally:
        first.stop()
    assert second.returncode == 1
    assert second.stderr.strip().splitlines() == [
        f"stead: another stead serve is running on {tmp_path / 'data'}; stop it or use "
        "another STEAD_DATA_DIR"
    ]
