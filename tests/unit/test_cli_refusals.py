"""Operator commands on a database that lacks what they name: one line each,
never a traceback, and nothing written."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from stead.cli import app
from tests.databases import serve_env


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    """A data directory whose database is migrated and holds no workspace."""
    made = CliRunner().invoke(app, ["db", "migrate", "--data-dir", str(tmp_path)])
    assert made.exit_code == 0, made.output
    return tmp_path


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        # Before, a NotFound traceback.
        (["keys", "create", "--workspace", "wrkspc_nope"], 1, "stead: --workspace: no workspace"),
        # Before, --workspace was ignored: the key went to a new workspace.
        (
            ["keys", "create", "--workspace", "wrkspc_nope", "--new-workspace", "w"],
            2,
            "stead: --workspace and --new-workspace: give one of them",
        ),
        # Before, an IndexError traceback.
        (
            [
                "webhooks",
                "create",
                "--url",
                "https://hooks.test/h",
                "--event-type",
                "session.created",
            ],
            1,
            "stead: --workspace: no workspace yet (stead keys create makes one)",
        ),
        # Before, stored as a limit of $0.00 without a word.
        (["limits", "set", "--monthly-spend", "0.001"], 2, "stead: --monthly-spend: US dollars"),
        # Before, an OverflowError traceback: no number of cents.
        (["limits", "set", "--monthly-spend", "1e308"], 2, "stead: --monthly-spend: US dollars"),
    ],
)
def test_a_command_that_cannot_be_done_says_why_in_one_line(
    empty: Path, args: list[str], code: int, line: str
) -> None:
    result = CliRunner().invoke(app, [*args, "--data-dir", str(empty)])
    assert result.exit_code == code, result.output
    assert result.stderr.startswith(line) and result.stderr.count("\n") == 1
    listed = CliRunner().invoke(app, ["keys", "list", "--json", "--data-dir", str(empty)])
    assert listed.stdout.strip() == "[]"


def test_a_database_whose_directory_is_not_there_is_one_line(tmp_path: Path) -> None:
    """The lock beside a SQLite file named in a missing directory: before, a
    FileNotFoundError traceback. An in-memory database has no file to lock."""
    from stead.config import Settings
    from stead.runtime import DataDirInUse, brain_lock

    missing = tmp_path / "nowhere" / "stead.db"
    locking = brain_lock(tmp_path / "data", missing)
    with pytest.raises(DataDirInUse, match=r"^cannot lock .*stead\.db\.lock: No such file"):
        locking.__enter__()
    memory = Settings(data_dir=tmp_path, database_url="sqlite:///:memory:")
    assert memory.sqlite_file is None


@pytest.mark.parametrize("given", ["-5", "0", "nan"])
def test_a_worker_s_max_idle_must_be_a_positive_number(given: str) -> None:
    """Before, each was taken (a negative wait, or none at all)."""
    args = ["worker", "--environment", "env_x", "--environment-key", "k", "--max-idle", given]
    result = CliRunner().invoke(app, [*args, "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "Invalid value for '--max-idle'" in result.output


@pytest.mark.parametrize(
    "args", [["secrets", "rotate-key"], ["secrets", "forget-key", "--lost", "00"], ["db", "brains"]]
)
@pytest.mark.parametrize("made", [False, True])
def test_a_command_on_a_data_directory_without_a_database_makes_none(
    tmp_path: Path, args: list[str], made: bool
) -> None:
    """A mistyped --data-dir, or one that is there but empty. Before, each made a
    new installation there (a database; the key commands a key file too) and
    said it had re-sealed, that the key was the database's already, or that no
    process was recorded."""
    missing = tmp_path / "typo"
    if made:
        missing.mkdir()
    result = CliRunner().invoke(app, [*args, "--data-dir", str(missing)], env={})
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith(f"stead: no stead database in {missing}")
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert list(missing.iterdir()) == [] if made else not missing.exists()


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_command_that_seals_on_postgresql_needs_the_shared_key(
    database_url: str, tmp_path: Path
) -> None:
    """Without STEAD_SECRET_KEY, as stead serve does. Before, each made a key file
    in its data directory, and the first to reach the database kept that key as
    the database's: every stead serve with the real key was refused from then on."""
    bare = {"STEAD_DATABASE_URL": database_url, "STEAD_SECRET_KEY": None}
    data = ["--data-dir", str(tmp_path / "data")]
    assert CliRunner().invoke(app, ["keys", "create", *data], env=bare).exit_code == 0
    hook = ["--url", "https://hooks.test/h", "--event-type", "session.created"]
    for args in (
        ["webhooks", "create", *hook],
        ["secrets", "rotate-key"],
        ["secrets", "forget-key", "--lost", "00"],
    ):
        refused = CliRunner().invoke(app, [*args, *data], env=bare)
        assert refused.exit_code == 2, (args, refused.output)
        assert refused.stderr.splitlines() == [
            "stead: STEAD_SECRET_KEY must be set on PostgreSQL: every stead serve of one "
            "database needs the same key (make one with: openssl rand -base64 32)"
        ]
    assert not (tmp_path / "data" / "secret.key").exists()
    shared = serve_env(database_url)
    made = CliRunner().invoke(app, ["webhooks", "create", *hook, *data], env=shared)
    assert made.exit_code == 0, made.output


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        # Before, a ValueError or InvalidURI traceback from the client.
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://127.0.0.1:99999", "Port out of range 0-65535"),
        # Before, a traceback from exec and shell; a worker retried it for good.
        ("127.0.0.1:8787", "give the server's http:// or https:// address"),
        ("ftp://secret@127.0.0.1", "give the server's http:// or https:// address"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [
        ["exec", "sesn_x", "--api-key", "k", "--", "ls"],
        ["shell", "sesn_x", "--api-key", "k"],
        ["worker", "--environment", "env_x", "--environment-key", "k"],
    ],
)
def test_a_server_url_no_request_can_reach_is_one_line(
    command: list[str], url: str, problem: str
) -> None:
    result = CliRunner().invoke(app, command, env={"STEAD_URL": url})
    assert result.exit_code == 2, result.output
    assert result.stderr == f"stead: --url (or STEAD_URL): {problem}\n"


@pytest.mark.parametrize("given", ["-1", "0", "nan"])
def test_a_sandbox_host_stop_waits_a_positive_number_of_seconds(tmp_path: Path, given: str) -> None:
    """Before, each was taken: the host was sent SIGTERM and the command then said
    it failed (exit 1), 'still answers after -1 s' or 'deadline must not be NaN'."""
    args = ["sandbox-host", "stop", "--wait", given, "--data-dir", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert "Invalid value for '--wait'" in result.output


def test_a_key_for_a_new_workspace_is_made_with_it_or_not_at_all(
    empty: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key's write fails (the database busy past its wait). Before, the
    workspace was committed in a transaction of its own: it stayed, empty, and
    the retry the message asks for made a second one."""
    from stead.store import DatabaseBusy, _workspaces

    def busy(*args: object, **kwargs: object) -> None:
        raise DatabaseBusy("database is locked")

    monkeypatch.setattr(_workspaces, "create_api_key", busy)
    args = ["keys", "create", "--new-workspace", "team", "--data-dir", str(empty)]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2, refused.output
    database = empty / "stead.db"
    assert refused.stderr.startswith(f"stead: {database}: no answer in time, try again")
    monkeypatch.undo()
    again = CliRunner().invoke(app, [*args, "--json"])
    assert again.exit_code == 0, again.output
    shown = CliRunner().invoke(app, ["limits", "show", "--json", "--data-dir", str(empty)])
    # The first workspace is the retry's: the failed command left none.
    assert json.loads(shown.stdout)["workspace_id"] == json.loads(again.stdout)["workspace_id"]


@pytest.mark.parametrize(
    "command",
    [["exec", "sesn_x", "--api-key", "k", "--", "ls"], ["shell", "sesn_x", "--api-key", "k"]],
)
def test_a_server_that_cannot_be_reached_is_named_without_its_credentials(
    command: list[str],
) -> None:
    """Before, the line printed the URL as given, its user:password@ too."""
    with socket.socket() as unused:  # a loopback port nothing listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    url = f"http://someone:hunter2@127.0.0.1:{port}/base"
    result = CliRunner().invoke(app, command, env={"STEAD_URL": url})
    assert result.exit_code == 1, result.output
    assert f"stead: cannot reach http://127.0.0.1:{port}/base: " in result.output
    assert "hunter2" not in result.output and "someone" not in result.output


HOOK = ["--url", "https://hooks.test/h", "--event-type", "session.created"]


@pytest.mark.parametrize(
    "args",
    [
        ["keys", "create"],
        ["webhooks", "list"],
        ["webhooks", "create", *HOOK],
        ["limits", "show"],
        ["limits", "set", "--monthly-tokens", "5"],
        ["limits", "set-environment", "env_x", "--session-sandbox-seconds", "5"],
        ["usage"],
    ],
)
def test_a_workspace_that_is_not_there_fails_as_in_every_command(
    empty: Path, args: list[str]
) -> None:
    """Exit 1, as for any id the database does not hold (a key, an endpoint);
    2 is for a value no database could take. Before, limits and usage exited 2."""
    result = CliRunner().invoke(
        app, [*args, "--workspace", "wrkspc_nope", "--data-dir", str(empty)]
    )
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("stead: --workspace") and "wrkspc_nope" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "args", [["webhooks", "create", *HOOK], ["limits", "show"], ["limits", "set-environment", "e"]]
)
def test_an_installation_without_a_workspace_fails_as_an_unknown_one(
    empty: Path, args: list[str]
) -> None:
    result = CliRunner().invoke(app, [*args, "--data-dir", str(empty)])
    assert result.exit_code == 1, result.output
    assert result.stderr == "stead: --workspace: no workspace yet (stead keys create makes one)\n"


@pytest.mark.parametrize("option", ["--name", "--new-workspace"])
@pytest.mark.parametrize("name", ["ci\nrevoked key_x", "\x1b[2Jci", "ci\x00"])
def test_a_key_or_workspace_name_with_a_control_character_is_refused(
    empty: Path, option: str, name: str
) -> None:
    """As a memory store's name is. Before, stored as given: a newline in a name
    made a line of its own in stead keys list, an escape sequence ran in the
    operator's terminal."""
    args = ["keys", "create", option, name, "--data-dir", str(empty)]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2, refused.output
    assert refused.stderr == f"stead: {option}: must not contain control characters\n"
    listed = CliRunner().invoke(app, ["keys", "list", "--json", "--data-dir", str(empty)])
    assert listed.stdout.strip() == "[]"


def test_a_name_stored_with_a_control_character_is_listed_escaped(empty: Path) -> None:
    from stead.store import open_store

    async def make() -> None:
        store = await open_store(f"sqlite:///{empty / 'stead.db'}")
        try:
            await store.new_workspace_key("w", "ci\n\x1b[2J")
        finally:
            await store.close()

    anyio.run(make)
    listed = CliRunner().invoke(app, ["keys", "list", "--data-dir", str(empty)])
    assert listed.exit_code == 0, listed.output
    assert "ci\\n\\x1b[2J" in listed.stdout and "\x1b" not in listed.stdout
    assert len(listed.stdout.splitlines()) == 2
