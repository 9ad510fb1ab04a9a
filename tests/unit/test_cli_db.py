"""``stead db migrate`` and ``stead db check`` against a database that is new,
behind (made by an older stead), current and ahead (migrated by a newer one),
on SQLite and PostgreSQL: one line each, and an exit code a script can test."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from click.testing import Result
from sqlalchemy import update
from typer.testing import CliRunner

from stead.cli import app
from stead.store import migrate
from stead.store.migrate import alembic_config
from tests.databases import BACKENDS
from tests.databases import engine as engine_of

ON_BOTH = pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
HEAD = migrate.HEAD
OLDER = "0008"


def _db(command_name: str, url: str, data_dir: Path) -> Result:
    args = ["db", command_name, "--data-dir", str(data_dir)]
    return CliRunner().invoke(app, args, env={"STEAD_DATABASE_URL": url})


def _stamp(url: str, revision: str) -> None:
    engine = engine_of(url)
    try:
        with engine.begin() as conn:
            conn.execute(update(migrate.version_table).values(version_num=revision))
    finally:
        engine.dispose()


def _older_database(url: str) -> None:
    engine = engine_of(url)
    try:
        config = alembic_config()
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, OLDER)
    finally:
        engine.dispose()


@ON_BOTH
def test_a_new_database_is_created_by_migrate_then_checks_clean(
    database_url: str, tmp_path: Path
) -> None:
    empty = _db("check", database_url, tmp_path)
    assert empty.exit_code == 1, empty.output
    assert empty.stderr.splitlines() == [
        "stead: no stead schema yet: stead db migrate (or stead serve) creates it"
    ]
    made = _db("migrate", database_url, tmp_path)
    assert made.exit_code == 0, made.output
    assert made.stdout.splitlines() == [f"database created at revision {HEAD}"]
    checked = _db("check", database_url, tmp_path)
    assert checked.exit_code == 0, checked.output
    assert checked.stdout.splitlines()[0] == f"schema at revision {HEAD}, this stead's"
    assert "no problems found" in checked.stdout
    again = _db("migrate", database_url, tmp_path)
    assert again.exit_code == 0 and again.stdout.splitlines() == [
        f"database already at revision {HEAD}"
    ]


@ON_BOTH
def test_an_older_database_is_behind_until_migrated(database_url: str, tmp_path: Path) -> None:
    _older_database(database_url)
    behind = _db("check", database_url, tmp_path)
    assert behind.exit_code == 1, behind.output
    assert behind.stderr.splitlines() == [
        f"stead: schema behind: revision {OLDER}, this stead's is {HEAD}: run stead db "
        "migrate (stead serve migrates it too)"
    ]
    migrated = _db("migrate", database_url, tmp_path)
    assert migrated.exit_code == 0, migrated.output
    assert migrated.stdout.splitlines() == [f"database migrated from {OLDER} to revision {HEAD}"]
    assert _db("check", database_url, tmp_path).exit_code == 0


@ON_BOTH
def test_a_database_of_a_newer_stead_is_refused_by_check_and_migrate(
    database_url: str, tmp_path: Path
) -> None:
    assert _db("migrate", database_url, tmp_path).exit_code == 0
    _stamp(database_url, "9999")
    line = (
        f"stead: schema ahead: revision 9999 was made by a newer stead (this one knows up "
        f"to {HEAD}): run the newer stead, or restore a backup"
    )
    for name in ("check", "migrate"):
        refused = _db(name, database_url, tmp_path)
        assert refused.exit_code == 1, refused.output
        assert refused.stderr.splitlines() == [line]


def test_migrate_makes_the_data_directorys_database(tmp_path: Path) -> None:
    data_dir = tmp_path / "new" / "data"
    args = ["db", "migrate", "--data-dir", str(data_dir)]
    made = CliRunner().invoke(app, args, env={})
    assert made.exit_code == 0, made.output
    assert made.stdout.splitlines() == [f"database created at revision {HEAD}"]
    assert (data_dir / "stead.db").exists()
    checked = CliRunner().invoke(app, ["db", "check", "--data-dir", str(data_dir)], env={})
    assert checked.exit_code == 0, checked.output


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_check_never_prints_the_database_password(database_url: str, tmp_path: Path) -> None:
    """Trust auth takes any password. Before, the clean check's last line was the
    URL as given, password and sslpassword with it."""
    from sqlalchemy import make_url

    url = make_url(database_url).set(password="hunter2")
    url = url.update_query_dict({"sslpassword": "topsecret"})
    given = url.render_as_string(hide_password=False)
    assert _db("migrate", given, tmp_path).exit_code == 0
    checked = _db("check", given, tmp_path)
    assert checked.exit_code == 0, checked.output
    assert "no problems found" in checked.stdout
    assert "hunter2" not in checked.output and "topsecret" not in checked.output
