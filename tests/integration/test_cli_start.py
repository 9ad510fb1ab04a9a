"""``stead serve`` started as a new user would, failing the ways a first start
fails: each stops with one line, and none spends the shown-once first key."""

from __future__ import annotations

import contextlib
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from stead.cli import app
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


def _command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stead", *args],
        env={"PATH": "/usr/bin:/bin", "STEAD_SANDBOX": "off", **env},
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )


def test_another_data_directory_naming_a_served_database_stops_with_one_line(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    """Before, a second server with its own data directory (its own key file) ran
    on the first one's SQLite file through STEAD_DATABASE_URL."""
    first = ServerProcess(tmp_path / "data", env=loop_env(fake_model), forker=forker).start()
    database = tmp_path / "data" / "stead.db"
    try:
        second = _command(
            "serve",
            "--port",
            str(free_port()),
            env={
                **loop_env(fake_model),
                "STEAD_DATA_DIR": str(tmp_path / "other"),
                "STEAD_DATABASE_URL": f"sqlite:///{database}",
            },
        )
        # Nor may the key be rotated under the running server: it would go on
        # sealing under the key the rotation throws away.
        rotated = _command("secrets", "rotate-key", env={"STEAD_DATA_DIR": str(first.data_dir)})
    finally:
        first.stop()
    assert second.returncode == 1
    assert second.stderr.strip().splitlines() == [
        f"stead: another stead serve is running on the database {database}; stop it or "
        "use another STEAD_DATABASE_URL"
    ]
    assert rotated.returncode == 1
    assert rotated.stderr.strip().splitlines() == [
        f"stead: another stead serve is running on {first.data_dir}; stop it or use "
        "another STEAD_DATA_DIR"
    ]
    assert not (first.data_dir / "secret.key.next").exists()


def test_a_data_directory_that_is_a_file_or_a_corrupt_database_stops_with_one_line(
    tmp_path: Path,
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    made = _command("serve", env={"STEAD_DATA_DIR": str(a_file)})
    assert (made.returncode, made.stderr) == (
        2,
        f"stead: STEAD_DATA_DIR: cannot use {a_file}: File exists\n",
    )
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "stead.db").write_bytes(bytes(range(256)) * 20)
    served = _command("serve", "--port", str(free_port()), env={"STEAD_DATA_DIR": str(corrupt)})
    assert (served.returncode, served.stderr.count("\n")) == (2, 1), served.stderr
    assert served.stderr.endswith(": file is not a database\n")
    for args in (["keys", "list"], ["db", "check"]):  # in this process: no start-up to wait for
        failed = CliRunner().invoke(app, [*args, "--data-dir", str(corrupt)])
        assert failed.exit_code == 2, args
        assert failed.stderr.endswith(": file is not a database\n"), args
        assert failed.stderr.count("\n") == 1


def test_a_stop_while_the_first_key_is_made_waits_until_it_is_shown(
    tmp_path: Path, fake_model: FakeModel
) -> None:
    """SIGTERM as soon as the key's row is committed: the key is still printed.
    Before, the process died between the commit and the line, and the shown-once
    key was spent unseen."""
    data = tmp_path / "data"
    env = {**loop_env(fake_model), "PATH": "/usr/bin:/bin", "STEAD_SANDBOX": "off"}
    command = [sys.executable, "-m", "stead", "serve", "--data-dir", str(data)]
    server = subprocess.Popen(
        [*command, "--port", str(free_port())],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _has_a_key(data / "stead.db"):
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.001)
        server.send_signal(signal.SIGTERM)
        out, _ = server.communicate(timeout=START_TIMEOUT)
    finally:
        server.kill()
        server.wait()
    assert "first API key (shown once, store it now): sk-stead-" in out


def _has_a_key(database: Path) -> bool:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
            return bool(db.execute("SELECT count(*) FROM api_keys").fetchone()[0])
    except sqlite3.Error:
        return False
