"""Bad settings stop the ``stead`` command before it starts anything, with one
line per bad setting that names it as the operator sets it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stead.cli import app
from stead.config import Settings
from stead.sandbox_host.settings import HostSettings

HOST = "sandbox-host"
BRAIN = "db"
"""``stead db check`` reads the brain's settings, as ``stead serve`` does."""
EXTRA_CA = (
    {"STEAD_EGRESS_EXTRA_CA_FILE": "/nonexistent/ca.pem"},
    "STEAD_EGRESS_EXTRA_CA_FILE: /nonexistent/ca.pem: not a readable PEM",
)
S3 = {"STEAD_BLOB_URL": "s3://bucket/prefix"}


@pytest.mark.parametrize(
    ("command", "env", "line"),
    [
        (
            HOST,
            {"STEAD_SANDBOX_UID_BASE": "1000"},
            "STEAD_SANDBOX_UID_BASE: Input should be greater",
        ),
        (
            HOST,
            {"STEAD_SANDBOX_UID_COUNT": "many"},
            "STEAD_SANDBOX_UID_COUNT: Input should be a valid",
        ),
        (
            HOST,
            {"STEAD_SANDBOX_UID_BASE": "2147000000", "STEAD_SANDBOX_UID_COUNT": "1000000"},
            "STEAD_SANDBOX_UID_BASE: 2147000000 + STEAD_SANDBOX_UID_COUNT (1000000) - 1 is past",
        ),
        (
            HOST,
            {"STEAD_EGRESS_HOSTS": '{"db.internal": "nowhere"}'},
            "STEAD_EGRESS_HOSTS: 'db.internal'",
        ),
        (
            HOST,
            {"STEAD_EGRESS_HOSTS": '{"bad name": "10.0.0.1"}'},
            "STEAD_EGRESS_HOSTS: 'bad name' is",
        ),
        (HOST, {"STEAD_EGRESS_HOSTS": "[1]"}, "STEAD_EGRESS_HOSTS: Input should be a valid"),
        (
            HOST,
            {"STEAD_SANDBOX_DISK_MB": "8"},
            "STEAD_SANDBOX_DISK_MB: Input should be greater than or equal to 16",
        ),
        (
            HOST,
            {"STEAD_SANDBOX_DISK_MB": str(10 * 1024**3)},  # bytes, where MiB are meant
            "STEAD_SANDBOX_DISK_MB: Input should be less than or equal to 16777216",
        ),
        (HOST, {"STEAD_SANDBOX_DISK_MB": "10G"}, "STEAD_SANDBOX_DISK_MB: Input should be a valid"),
        (HOST, *EXTRA_CA),
        # The brain's web tools read these too.
        (
            BRAIN,
            {"STEAD_WEB_SEARCH_URL": "searx.internal"},
            "STEAD_WEB_SEARCH_URL: 'searx.internal' is",
        ),
        (BRAIN, {"STEAD_WEB_SEARCH_URL": "ftp://searx.internal"}, "STEAD_WEB_SEARCH_URL: 'ftp://"),
        (
            BRAIN,
            {"STEAD_WEB_TIMEOUT_SECONDS": "0"},
            "STEAD_WEB_TIMEOUT_SECONDS: Input should be greater",
        ),
        (
            BRAIN,
            {"STEAD_WEB_FETCH_MAX_BYTES": "-1"},
            "STEAD_WEB_FETCH_MAX_BYTES: Input should be greater",
        ),
        (
            BRAIN,
            {"STEAD_EGRESS_HOSTS": '{"bad name": "10.0.0.1"}'},
            "STEAD_EGRESS_HOSTS: 'bad name' is",
        ),
        (BRAIN, *EXTRA_CA),
        (BRAIN, {"STEAD_OPENAI_MODELS": "notjson"}, "STEAD_OPENAI_MODELS: not valid JSON"),
        # OpenTelemetry's exporter dropped such a header and logged its value
        # (the collector's credential) at every start.
        (
            BRAIN,
            {"OTEL_EXPORTER_OTLP_HEADERS": "x-api-key:not-printed"},
            "OTEL_EXPORTER_OTLP_HEADERS: not a comma-separated list of name=value",
        ),
        (
            BRAIN,
            {"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "api-key=not-printed;v=1"},
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS: not a comma-separated list of name=value",
        ),
        (
            BRAIN,
            {"STEAD_OPENAI_MODELS": '{"llama3.1": "localhost:11434/v1"}'},
            "STEAD_OPENAI_MODELS: llama3.1: 'localhost:11434/v1' is not the http(s) base URL",
        ),
        (
            BRAIN,
            {"STEAD_UPSTREAM_BASE_URL": "ftp://models.internal"},
            "STEAD_UPSTREAM_BASE_URL: 'ftp://models.internal' is not the http(s) base URL",
        ),
        (
            BRAIN,
            {"STEAD_CONTEXT_WINDOWS": '{"llama3.1": 0}'},
            "STEAD_CONTEXT_WINDOWS: llama3.1: a context window is a positive",
        ),
        (
            BRAIN,
            {"STEAD_COMPACTION_THRESHOLD": "0.5", "STEAD_COMPACTION_KEEP_RATIO": "0.6"},
            "STEAD_COMPACTION_KEEP_RATIO: must be below STEAD_COMPACTION_THRESHOLD",
        ),
        (BRAIN, {"STEAD_EGRESS_HOSTS": "notjson"}, "STEAD_EGRESS_HOSTS: not valid JSON"),
        (BRAIN, {"STEAD_PORT": "abc"}, "STEAD_PORT: Input should be a valid integer"),
        (BRAIN, {"STEAD_SANDBOX": "docker"}, "STEAD_SANDBOX: Input should be"),
        (
            HOST,
            {"STEAD_SANDBOX_HOST_ADVERTISE": "10.0.0.5:7070"},
            "STEAD_SANDBOX_HOST_ADVERTISE: '10.0.0.5:7070' is not tcp://host:port",
        ),
        (
            HOST,
            {"STEAD_SANDBOX_HOST_ADVERTISE": "tcp://10.0.0.5:7070"},
            "STEAD_SANDBOX_HOST_ADVERTISE: the host listens on no TCP port",
        ),
        (
            HOST,
            {
                "STEAD_SANDBOX_HOST_LISTEN_TCP": "0.0.0.0:7070",
                "STEAD_SANDBOX_HOST_TOKEN": "t" * 32,
                "STEAD_SANDBOX_HOST_ADVERTISE": "tcp://10.0.0.5:port",
            },
            "STEAD_SANDBOX_HOST_ADVERTISE: '10.0.0.5:port' is not tcp://host:port",
        ),
        (
            BRAIN,
            {"STEAD_SANDBOX_HOST": "tcp://10.0.0.5:²", "STEAD_SANDBOX_HOST_TOKEN": "t" * 32},
            "STEAD_SANDBOX_HOST: 'tcp://10.0.0.5:²' is not tcp://host:port",
        ),
        (
            HOST,
            {"STEAD_SANDBOX_HOST_LISTEN_TCP": "0.0.0.0"},
            "STEAD_SANDBOX_HOST_LISTEN_TCP: '0.0.0.0' is not a host:port",
        ),
        # Before, each of these started and failed later: a negative timer made a
        # server that answered only 503s, a port past 65535 bound another one.
        (
            BRAIN,
            {"STEAD_REAPER_INTERVAL_SECONDS": "-1"},
            "STEAD_REAPER_INTERVAL_SECONDS: Input should be greater than 0",
        ),
        (
            BRAIN,
            {"STEAD_SSE_HEARTBEAT_SECONDS": "nan"},
            "STEAD_SSE_HEARTBEAT_SECONDS: Input should be a finite number",
        ),
        (BRAIN, {"STEAD_PORT": "99999"}, "STEAD_PORT: Input should be less than or equal"),
        (
            BRAIN,
            {"STEAD_MODEL_PRICES": '{"m": {"input": 1e15, "output": 1}}'},
            "STEAD_MODEL_PRICES: m: a price must be a number from 0 to 1,000,000",
        ),
        # Before, a delivery's next date overflowed and ended the webhook courier.
        (
            BRAIN,
            {"STEAD_WEBHOOK_RETRY_MAX_SECONDS": "1e20"},
            "STEAD_WEBHOOK_RETRY_MAX_SECONDS: Input should be less than or equal to 315360000",
        ),
        (BRAIN, {"STEAD_LOG_LEVEL": "loud"}, "STEAD_LOG_LEVEL: Input should be 'critical'"),
        (BRAIN, {"STEAD_SANDBOX_PIDS": "0"}, "STEAD_SANDBOX_PIDS: Input should be greater"),
        (BRAIN, {"STEAD_MAX_RUN_ATTEMPTS": "0"}, "STEAD_MAX_RUN_ATTEMPTS: Input should be"),
        (
            BRAIN,
            {"STEAD_SANDBOX_HOST": "tcp://garbage", "STEAD_SANDBOX_HOST_TOKEN": "t" * 32},
            "STEAD_SANDBOX_HOST: 'tcp://garbage' is not tcp://host:port",
        ),
        (
            BRAIN,
            {"STEAD_SANDBOX_HOST": "tcp://127.0.0.1:7070"},
            "STEAD_SANDBOX_HOST_TOKEN: STEAD_SANDBOX_HOST is a tcp:// address",
        ),
        (
            HOST,
            {"STEAD_SANDBOX_HOST_LISTEN_TCP": "127.0.0.1:7071"},
            "STEAD_SANDBOX_HOST_LISTEN_TCP: a TCP listener needs STEAD_SANDBOX_HOST_TOKEN",
        ),
        # The token keys the TCP protocol's TLS: a short one is soon guessed.
        *(
            (room, {"STEAD_SANDBOX_HOST_TOKEN": "s3cret"}, "STEAD_SANDBOX_HOST_TOKEN: at least 16")
            for room in (BRAIN, HOST)
        ),
        (HOST, {"STEAD_LOG_LEVEL": "loud"}, "STEAD_LOG_LEVEL: Input should be 'critical'"),
        # Before, taken: a snapshot's expiry date overflowed in the host's collector.
        *(
            (HOST, {name: given}, f"{name}: Input should be")
            for name in ("STEAD_SNAPSHOT_TTL_SECONDS", "STEAD_BLOB_TIMEOUT_SECONDS")
            for given in ("inf", "nan", "1e300")
        ),
        (HOST, {"STEAD_BLOB_URL": "ftp://blobs"}, "STEAD_BLOB_URL: blob URL 'ftp://blobs'"),
        (HOST, {"STEAD_BLOB_URL": "file://relative/dir"}, "STEAD_BLOB_URL: blob URL"),
        # Before, the host stopped with a traceback and a brain started, its
        # uploads and snapshots failing later.
        *(
            (command, env, line)
            for command in (HOST, BRAIN)
            for env, line in (
                (
                    {**S3, "STEAD_S3_ENDPOINT": "http://10.0.0.5:9000"},
                    "STEAD_S3_ENDPOINT: 'http://10.0.0.5:9000': a plain http:// endpoint",
                ),
                (
                    {**S3, "STEAD_S3_ENDPOINT": "ftp://s3.internal"},
                    "STEAD_S3_ENDPOINT: 'ftp://s3.internal': expected http(s)://",
                ),
                (
                    {**S3, "STEAD_S3_ACCESS_KEY_ID": "AKID-not-printed"},
                    "STEAD_S3_SECRET_ACCESS_KEY: the S3 access key id and secret access key go",
                ),
                (
                    {**S3, "STEAD_S3_SECRET_ACCESS_KEY": "never-printed"},
                    "STEAD_S3_SECRET_ACCESS_KEY: the S3 access key id and secret access key go",
                ),
            )
        ),
    ],
)
def test_a_bad_setting_stops_start_up_with_one_line_naming_it(
    command: str, env: dict[str, str], line: str, tmp_path: Path
) -> None:
    # A data directory of the test's own, should the settings ever pass.
    args = [command, *(["check"] if command == BRAIN else []), "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"stead: {line}")
    assert result.stderr.count("\n") == 1
    assert "not-printed" not in result.stderr and "never-printed" not in result.stderr


def test_an_empty_data_dir_is_refused_and_a_log_level_may_be_upper_case(tmp_path: Path) -> None:
    """Before, an empty STEAD_DATA_DIR made the store in the working directory."""
    result = CliRunner().invoke(app, [BRAIN, "check"], env={"STEAD_DATA_DIR": ""})
    assert (result.exit_code, result.stderr) == (
        2,
        "stead: STEAD_DATA_DIR: empty: name a directory\n",
    )
    assert Settings(data_dir=tmp_path, log_level="INFO").log_level == "info"


@pytest.mark.parametrize(
    ("name", "under", "line"),
    [
        ("STEAD_SANDBOX_HOST_STATE_DIR", "", "{file} is not a directory"),
        ("STEAD_SANDBOX_HOST_STATE_DIR", "/state", "{file} is not a directory"),
        ("STEAD_SANDBOX_WORK_DIR", "", "{file} is not a directory"),
        ("STEAD_SANDBOX_HOST", "", "{file} is there and is not a socket"),
    ],
)
def test_a_host_path_that_is_a_file_stops_start_up_with_one_line_naming_it(
    name: str, under: str, line: str, tmp_path: Path
) -> None:
    file = tmp_path / "afile"
    file.write_text("")
    args = [HOST, "--data-dir", str(tmp_path / "data")]
    result = CliRunner().invoke(app, args, env={name: f"{file}{under}"})
    assert result.exit_code == 2
    assert result.stderr == f"stead: {name}: {line.format(file=file)}\n"


@pytest.mark.parametrize(
    ("env", "socket"),
    [
        ({}, "state/host.sock"),
        ({"STEAD_SANDBOX_HOST": "/run/stead/host.sock"}, "/run/stead/host.sock"),
        ({"STEAD_SANDBOX_HOST": "unix:///run/stead/host.sock"}, "/run/stead/host.sock"),
        # A brain's address of a host on another machine; this one's is its own.
        ({"STEAD_SANDBOX_HOST": "tcp://10.0.0.5:7070"}, "state/host.sock"),
    ],
)
def test_a_host_listens_where_its_brain_dials(
    env: dict[str, str], socket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEAD_SANDBOX_HOST_STATE_DIR", str(tmp_path / "state"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert HostSettings().options().socket_path == tmp_path / socket


@pytest.mark.parametrize(
    ("url", "line"),
    [
        ("mysql://root@127.0.0.1/stead", "unsupported database URL mysql://root@127.0.0.1/stead"),
        # Nothing listens on port 1; the password is never printed.
        (
            "postgresql://stead:hunter2@127.0.0.1:1/stead",
            "cannot open postgresql://stead:***@127.0.0.1:1/stead: connection",
        ),
        ("postgresql://stead@127.0.0.1:notaport/stead", "database URL is not a valid URL"),
        # libpq takes a password in the query too: before, printed as it was.
        (
            "postgresql://stead@127.0.0.1:1/stead?password=hunter2",
            "cannot open postgresql://stead@127.0.0.1:1/stead?password=REDACTED: connection",
        ),
        # A server that answers, with no such database.
        (
            "postgresql://postgres@127.0.0.1:5432/stead_no_such_database",
            "cannot open postgresql://postgres@127.0.0.1:5432/stead_no_such_database: connection",
        ),
    ],
)
def test_a_database_that_cannot_be_opened_stops_start_up_with_one_line(
    url: str, line: str, tmp_path: Path
) -> None:
    args = ["db", "check", "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args, env={"STEAD_DATABASE_URL": url})
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"stead: STEAD_DATABASE_URL: {line}"), result.stderr
    assert result.stderr.count("\n") == 1
    assert "hunter2" not in result.output


def test_a_server_that_never_answers_stops_the_command_at_the_connect_timeout(
    tmp_path: Path,
) -> None:
    # The kernel completes the handshake for a listening socket nobody accepts
    # on; the server's answer never comes, so only the timeout ends the wait.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        url = f"postgresql://stead@127.0.0.1:{port}/stead?connect_timeout=1"
        args = ["db", "check", "--data-dir", str(tmp_path)]
        result = CliRunner().invoke(app, args, env={"STEAD_DATABASE_URL": url})
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"stead: STEAD_DATABASE_URL: cannot open {url}: "), (
        result.stderr
    )
    assert "timeout" in result.stderr


@pytest.mark.parametrize("given", ["0", "²"])  # before, the second was a traceback
def test_a_connect_timeout_of_no_whole_seconds_is_refused(tmp_path: Path, given: str) -> None:
    url = f"postgresql://stead@127.0.0.1:5432/stead?connect_timeout={given}"
    args = ["db", "check", "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args, env={"STEAD_DATABASE_URL": url})
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"stead: STEAD_DATABASE_URL: connect_timeout={given!r} in the database URL: give "
        "whole seconds, 1 or more\n"
    )


@pytest.mark.parametrize(
    ("env", "address"),
    [
        ({}, None),
        ({"STEAD_SANDBOX_HOST_LISTEN_TCP": "10.0.0.5:7070"}, "tcp://10.0.0.5:7070"),
        ({"STEAD_SANDBOX_HOST_LISTEN_TCP": "0.0.0.0:7070"}, None),  # no machine dials that
        (
            {
                "STEAD_SANDBOX_HOST_LISTEN_TCP": "0.0.0.0:7070",
                "STEAD_SANDBOX_HOST_ADVERTISE": "tcp://host-a.internal:7070",
            },
            "tcp://host-a.internal:7070",
        ),
    ],
)
def test_a_host_is_reached_at_its_advertised_or_listen_address(
    env: dict[str, str | None], address: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEAD_SANDBOX_HOST_TOKEN", "t" * 32)  # a TCP listener needs it
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    assert HostSettings().options().advertise == address


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
)
def test_an_empty_otlp_endpoint_is_unset_and_records_no_spans(
    variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As OpenTelemetry reads its variables: empty is unset. Before, an empty one
    turned span export on, to the exporter's default (localhost:4318)."""
    from stead.telemetry import open_tracing

    monkeypatch.setenv(variable, "")
    settings = Settings(data_dir=tmp_path)
    assert settings.otlp_endpoint is None
    assert open_tracing(settings).provider is None


def test_a_path_setting_that_starts_with_a_tilde_is_under_the_home_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a shell makes it of a word it expands (a quoted value, a compose file or
    a unit's Environment= is not). Before, each was a directory named '~' in the
    working directory: stead serve's database, keys and blobs landed there."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    for name, value in {
        "STEAD_DATA_DIR": "~/data",
        "STEAD_SANDBOX_HOST_STATE_DIR": "~/state",
        "STEAD_SANDBOX_WORK_DIR": "~/work",
        "STEAD_SANDBOX_UID_REGISTRY": "~/uids.json",
        "STEAD_SANDBOX_HOST": "unix://~/host.sock",
    }.items():
        monkeypatch.setenv(name, value)
    brain, host = Settings(), HostSettings()
    assert brain.data_dir == host.data_dir == home / "data"
    assert brain.resolved_sandbox_host_state_dir == home / "state"
    assert brain.sandbox_host == host.sandbox_host == f"unix://{home}/host.sock"
    options = host.options()
    assert (options.state_dir, options.work_dir) == (home / "state", home / "work")
    assert (options.uid_registry, options.socket_path) == (home / "uids.json", home / "host.sock")
    made = CliRunner().invoke(app, ["db", "migrate"], env={"STEAD_DATA_DIR": "~/cli"})
    assert made.exit_code == 0, made.output
    assert (home / "cli" / "stead.db").exists() and not (tmp_path / "~").exists()
