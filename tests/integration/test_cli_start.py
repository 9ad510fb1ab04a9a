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

import pytest
from typer.testing import CliRunner

from stead.cli import app
from stead.store import migrate
from stead.testing import FakeModel, ServeForker, ServerProcess, free_port
from tests.conftest import loop_env

START_TIMEOUT = 60.0


def _command(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stead", *args],
        env={"PATH": "/usr/bin:/bin", "STEAD_SANDBOX": "off", **env},
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )


def _serve(data_dir: Path, port: int, fake: FakeModel) -> subprocess.CompletedProcess[str]:
    """``stead serve`` expected to stop by itself (it cannot start)."""
    env = {**loop_env(fake), "STEAD_SANDBOX": "off"}
    return _command("serve", "--data-dir", str(data_dir), "--port", str(port), env=env)


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


def test_a_second_server_or_a_key_rotation_beside_a_server_stops_with_one_line(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    """Another server on its data directory, or on its database named from another
    data directory (its own key file) through STEAD_DATABASE_URL, or a rotation of
    its key, which it would go on sealing under. Before, the last two ran."""
    first = ServerProcess(tmp_path / "data", env=loop_env(fake_model), forker=forker).start()
    database = first.data_dir / "stead.db"
    elsewhere = {
        "STEAD_DATA_DIR": str(tmp_path / "other"),
        "STEAD_DATABASE_URL": f"sqlite:///{database}",
    }
    try:
        same_dir = _serve(first.data_dir, free_port(), fake_model)
        same_database = _command(
            "serve", "--port", str(free_port()), env={**loop_env(fake_model), **elsewhere}
        )
        rotated = _command("secrets", "rotate-key", env={"STEAD_DATA_DIR": str(first.data_dir)})
    finally:
        first.stop()
    in_use = (
        f"stead: another stead serve is running on {first.data_dir}; stop it or use "
        "another STEAD_DATA_DIR"
    )
    assert (same_dir.returncode, same_dir.stderr.strip().splitlines()) == (1, [in_use])
    assert (rotated.returncode, rotated.stderr.strip().splitlines()) == (1, [in_use])
    assert same_database.returncode == 1
    assert same_database.stderr.strip().splitlines() == [
        f"stead: another stead serve is running on the database {database}; stop it or "
        "use another STEAD_DATABASE_URL"
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


def test_a_database_of_a_newer_stead_is_named_by_its_file_when_no_url_was_set(
    tmp_path: Path, fake_model: FakeModel
) -> None:
    """Before, the line named STEAD_DATABASE_URL, a setting the user never set."""
    data = tmp_path / "data"
    assert _command("db", "migrate", "--data-dir", str(data), env={}).returncode == 0
    with contextlib.closing(sqlite3.connect(data / "stead.db")) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    line = (
        f"stead: {data / 'stead.db'}: the database was migrated by a newer stead (revision "
        f"9999; this stead knows up to {migrate.HEAD}): run the newer stead, or restore a backup"
    )
    by_option = _serve(data, free_port(), fake_model)
    by_variable = _command("serve", "--port", str(free_port()), env={"STEAD_DATA_DIR": str(data)})
    for refused in (by_option, by_variable):
        assert (refused.returncode, refused.stderr) == (2, line + "\n")
        assert "sk-stead-" not in refused.stdout
    listed = CliRunner().invoke(app, ["keys", "list", "--data-dir", str(data)])
    assert (listed.exit_code, listed.stderr) == (2, line + "\n")


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


def test_a_host_setting_the_host_would_refuse_stops_serve_before_it_writes(
    tmp_path: Path, forker: ServeForker
) -> None:
    # A host this server would start (bwrap, autostart) listens on TCP with no token.
    env = {"PATH": "/usr/bin:/bin", "STEAD_SANDBOX_HOST_LISTEN_TCP": "127.0.0.1:7071"}
    data = tmp_path / "data"
    command = ("serve", "--data-dir", str(data), "--port", str(free_port()))
    failed = forker.complete(command, env, START_TIMEOUT)
    assert (failed.returncode, failed.stderr) == (
        2,
        "stead: STEAD_SANDBOX_HOST_LISTEN_TCP: a TCP listener needs STEAD_SANDBOX_HOST_TOKEN\n",
    )
    assert not data.exists()


def test_a_span_export_setting_the_sdk_refuses_stops_with_one_line(
    tmp_path: Path, fake_model: FakeModel
) -> None:
    """``OTEL_BSP_*`` values OpenTelemetry's batch processor refuses: before, the
    server showed its first key and then ended in a traceback."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs stead[otlp]")
    env = {
        **loop_env(fake_model),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "OTEL_BSP_MAX_QUEUE_SIZE": "0",
    }
    failed = _command(
        "serve", "--data-dir", str(tmp_path / "data"), "--port", str(free_port()), env=env
    )
    assert failed.returncode == 2, failed.stderr
    assert failed.stderr.strip().splitlines() == [
        "stead: OTEL_BSP_MAX_QUEUE_SIZE: max_queue_size must be a positive integer."
    ]
    assert "sk-stead-" not in failed.stdout
