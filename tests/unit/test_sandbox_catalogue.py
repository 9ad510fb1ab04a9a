"""The sandbox host's catalogue on real SQLite files: upgrades keep what an
older version recorded, and old exec records are pruned, running ones never."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stead.sandbox_host.catalogue import SCHEMA_VERSION, Catalogue, CatalogueTooNew

pytestmark = pytest.mark.anyio

VERSION_1 = """
CREATE TABLE sandboxes (id TEXT PRIMARY KEY, uid INTEGER NOT NULL UNIQUE,
    config TEXT NOT NULL, created_at REAL NOT NULL,
    active_seconds REAL NOT NULL DEFAULT 0, destroyed_at REAL);
CREATE TABLE snapshots (id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL,
    blob_key TEXT NOT NULL, size INTEGER NOT NULL, sha256 TEXT NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, deleted_at REAL);
CREATE TABLE execs (sandbox_id TEXT NOT NULL, op_key TEXT NOT NULL,
    state TEXT NOT NULL, result TEXT, PRIMARY KEY (sandbox_id, op_key));
INSERT INTO execs VALUES ('sbx_a', 'op_1', 'finished', '{"output": "hi"}');
PRAGMA user_version=1;
"""


async def test_a_version_1_catalogue_is_upgraded_with_its_records(tmp_path: Path) -> None:
    path = tmp_path / "catalogue.db"
    with sqlite3.connect(path) as db:
        db.executescript(VERSION_1)
    catalogue = Catalogue.open(path)
    try:
        assert await catalogue.exec_record("sbx_a", "op_1") == ("finished", '{"output": "hi"}')
        await catalogue.put_exec("sbx_a", "op_2", "running", None, now=100.0)
        # Records from before the upgrade count their age from it, not from 1970.
        assert await catalogue.prune_execs(before=1000.0, keep=set()) == 1
        assert await catalogue.exec_record("sbx_a", "op_1") is not None
    finally:
        catalogue.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    Catalogue.open(path).close()  # opening the newest version again changes nothing


async def test_a_catalogue_from_a_newer_stead_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "catalogue.db"
    Catalogue.open(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(CatalogueTooNew, match="newer than this stead"):
        Catalogue.open(path)


def test_a_host_on_the_catalogue_of_a_newer_stead_stops_with_one_line(tmp_path: Path) -> None:
    """As ``stead serve`` refuses a database of a newer stead: one line, no
    traceback, before anything is written (a host downgraded, say)."""
    state = tmp_path / "state"
    Catalogue.open(state / "catalogue.sqlite3").close()
    with sqlite3.connect(state / "catalogue.sqlite3") as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = (state / "catalogue.sqlite3").read_bytes()
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
    env = {
        **inherited,
        "STEAD_DATA_DIR": str(tmp_path),
        "STEAD_SANDBOX_HOST_STATE_DIR": str(state),
        "STEAD_SANDBOX_WORK_DIR": str(tmp_path / "work"),
    }
    ran = subprocess.run(
        [sys.executable, "-m", "stead", "sandbox-host"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 2
    assert ran.stderr == (
        f"stead: the sandbox catalogue is at version {SCHEMA_VERSION + 1}, newer than this "
        f"stead ({SCHEMA_VERSION}): upgrade stead or use another STEAD_SANDBOX_HOST_STATE_DIR\n"
    )
    assert (state / "catalogue.sqlite3").read_bytes() == before


async def test_old_exec_records_are_pruned_except_those_still_running(tmp_path: Path) -> None:
    catalogue = Catalogue.open(tmp_path / "catalogue.db")
    try:
        await catalogue.put_exec("sbx_a", "old", "finished", "{}", now=10.0)
        await catalogue.put_exec("sbx_a", "old_running", "running", None, now=10.0)
        await catalogue.put_exec("sbx_b", "old", "finished", "{}", now=10.0)
        await catalogue.put_exec("sbx_a", "new", "finished", "{}", now=50.0)
        pruned = await catalogue.prune_execs(before=20.0, keep={("sbx_a", "old_running")})
        assert pruned == 2
        assert await catalogue.exec_record("sbx_a", "old") is None
        assert await catalogue.exec_record("sbx_b", "old") is None
        assert await catalogue.exec_record("sbx_a", "old_running") == ("running", None)
        assert await catalogue.exec_record("sbx_a", "new") == ("finished", "{}")
        # Finishing rewrites the record's age: a long command's result is kept
        # for the whole retention after it ends.
        await catalogue.put_exec("sbx_a", "old_running", "finished", "{}", now=60.0)
        assert await catalogue.prune_execs(before=55.0, keep=set()) == 1
        assert await catalogue.exec_record("sbx_a", "old_running") == ("finished", "{}")
    finally:
        catalogue.close()
