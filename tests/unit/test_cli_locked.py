"""Operator commands against a database another process holds locked (a running
server's long write, an operator's SQL shell): one line once the wait runs out,
exit 2 as for a database that cannot be reached, and nothing written. And the
other way round: a command that only reads holds no lock a server waits on."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from stead.cli import app
from tests.databases import engine as engine_of

SHORT_WAIT_MS = 200
"""The busy timeout (SQLite) or lock_timeout (PostgreSQL) of the locked commands."""


def _stead(*args: str, env: dict[str, str | None]) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_a_sqlite_database_locked_by_another_process_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, 'OperationalError: database is locked' in a screenful of
    traceback (the engine's own BEGIN raises the driver's error unwrapped)."""
    data = ["--data-dir", str(tmp_path)]
    assert _stead("db", "migrate", *data, env={})[0] == 0
    assert _stead("keys", "create", *data, env={})[0] == 0
    monkeypatch.setattr("stead.store.sqlite.BUSY_TIMEOUT_MS", SHORT_WAIT_MS)
    holder = sqlite3.connect(tmp_path / "stead.db", isolation_level=None)
    with contextlib.closing(holder):
        holder.execute("BEGIN EXCLUSIVE")
        for args in (["keys", "list"], ["keys", "create"], ["db", "check"]):
            code, out, err = _stead(*args, *data, env={})
            assert (code, out) == (2, ""), (args, err)
            assert err.startswith(f"stead: {tmp_path / 'stead.db'}: cannot open sqlite:///"), args
            assert err.endswith(": database is locked\n") and err.count("\n") == 1, args
        holder.execute("ROLLBACK")
    code, out, _ = _stead("keys", "list", "--json", *data, env={})
    assert code == 0 and len(json.loads(out)) == 1


@pytest.mark.postgres
@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
def test_a_postgresql_row_lock_not_granted_in_time_is_one_line(
    database_url: str, tmp_path: Path
) -> None:
    """A key's row held by another transaction while stead keys revoke waits for
    it. Before, 'DatabaseBusy: canceling statement due to lock timeout' in a
    traceback (exit 1)."""
    # The URL's options come after stead's own: this lock_timeout wins.
    short = database_url.replace(
        "?options=", f"?options={quote(f'-clock_timeout={SHORT_WAIT_MS} ')}"
    )
    env: dict[str, str | None] = {"STEAD_DATABASE_URL": short}
    data = ["--data-dir", str(tmp_path)]
    code, out, _ = _stead("keys", "create", "--json", *data, env=env)
    assert code == 0
    key_id = json.loads(out)["id"]
    holder = engine_of(database_url)
    try:
        with holder.begin() as conn:
            conn.execute(text("SELECT 1 FROM api_keys WHERE id = :id FOR UPDATE"), {"id": key_id})
            code, out, err = _stead("keys", "revoke", key_id, *data, env=env)
    finally:
        holder.dispose()
    assert (code, out) == (2, ""), err
    assert err == (
        "stead: STEAD_DATABASE_URL: no answer in time, try again: canceling statement "
        "due to lock timeout\n"
    )
    code, out, _ = _stead("keys", "list", "--json", *data, env=env)
    assert code == 0 and json.loads(out)[0]["revoked_at"] is None


def test_db_check_leaves_a_running_server_free_to_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process's write while the check scans (on a 2.9 GB database its
    scans took 20 s). Before, the check held the write lock throughout, and a
    running server's writes were refused (503) once its busy timeout ran out."""
    from stead.store import _integrity

    data = ["--data-dir", str(tmp_path)]
    assert _stead("db", "migrate", *data, env={})[0] == 0
    writes: list[str] = []
    scan = _integrity._engine_findings

    def scan_beside_a_write(conn: Any) -> list[Any]:
        writer = sqlite3.connect(tmp_path / "stead.db", isolation_level=None, timeout=0)
        with contextlib.closing(writer):
            try:
                writer.execute("BEGIN IMMEDIATE")
                writer.execute("ROLLBACK")
                writes.append("written")
            except sqlite3.OperationalError as exc:
                writes.append(str(exc))
        return scan(conn)

    monkeypatch.setattr(_integrity, "_engine_findings", scan_beside_a_write)
    code, out, err = _stead("db", "check", *data, env={})
    assert code == 0, err
    assert "no problems found" in out
    assert writes == ["written"]
