"""Schema versions: the migrations build ``tables/``; a new database is created
straight from it with the same result; a database at head opens without Alembic;
one migrated by a newer stead is refused; starts at once migrate once. On SQLite
and on PostgreSQL where the test is not about SQLite's files."""

from __future__ import annotations

import re
import sqlite3
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, insert, inspect, select, text, update

from stead.store import StoreUnavailable, migrate, open_store, tables
from stead.store._usage import LEDGER_COUNTERS
from stead.store.tables import installation_secrets, metadata, usage_ledger, workspaces
from tests.databases import BACKENDS, engine

pytestmark = pytest.mark.anyio
on_both = pytest.mark.parametrize("database_url", BACKENDS, indirect=True)
NO_ALEMBIC = "print(sorted(m for m in sys.modules if m.startswith(('alembic', 'mako'))))"


def _migrated(path: Path, revision: str = "head") -> Engine:
    """A database built by running the migrations (up to ``revision``)."""
    return _migrated_at(f"sqlite:///{path}", revision)


def _migrated_at(url: str, revision: str = "head") -> Engine:
    built = engine(url)
    config = migrate.alembic_config()
    with built.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    return built


def _schema(path: Path) -> dict[str, Any]:
    """Everything SQLite knows of a database's schema; a table's constraints are
    compared as a set (the migrations and ``create_all`` list them in another order,
    and a column a migration adds follows the last one on its line)."""
    conn = sqlite3.connect(path)
    found: dict[str, Any] = {}
    master = "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY name"
    for kind, name, table, sql in conn.execute(master):
        items = [
            item
            for line in (sql or "").splitlines()
            for item in re.split(r",\s+(?=\w+ [A-Z]+)", line.strip().rstrip(","))
        ]
        lines = sorted(items)
        found[name] = (kind, table, lines)
        if kind == "table":
            found[f"{name} columns"] = conn.execute(f"PRAGMA table_xinfo({name})").fetchall()
            found[f"{name} keys"] = sorted(conn.execute(f"PRAGMA foreign_key_list({name})"))
            for index in conn.execute(f"PRAGMA index_list({name})").fetchall():
                info = conn.execute(f"PRAGMA index_xinfo({index[1]})").fetchall()
                found[f"{name} index {index[1]}"] = (index[2:], info)
    conn.close()
    return found


def test_the_head_revision_in_code_is_alembics() -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config())
    assert script.get_current_head() == migrate.HEAD, "move migrate.HEAD to the new migration"


@on_both
def test_the_migrations_build_the_tables(database_url: str) -> None:
    built = _migrated_at(database_url)
    with built.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    built.dispose()


def test_every_table_is_named_by_the_schema_package() -> None:
    """A table's module is imported with the package, so it is on ``metadata``;
    its name is imported from the package, as every query module does."""
    named = {name: getattr(tables, name) for name in tables.__all__ if name != "metadata"}
    assert set(named.values()) == set(metadata.tables.values())
    assert all(name == table.name for name, table in named.items())


@on_both
async def test_a_new_database_is_what_the_migrations_build(database_url: str) -> None:
    await (await open_store(database_url)).close()
    built = engine(database_url)
    with built.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
        assert migrate.revisions(conn) == {migrate.HEAD}
        seeded = conn.execute(select(installation_secrets.c.name))
        assert list(seeded.scalars()) == [migrate.CURSOR_SECRET]
    built.dispose()


@on_both
async def test_a_database_of_a_newer_stead_is_refused_with_one_line(database_url: str) -> None:
    await (await open_store(database_url)).close()
    built = engine(database_url)
    with built.begin() as conn:
        conn.execute(update(migrate.version_table).values(version_num="9999"))
    with pytest.raises(StoreUnavailable) as refused:
        await open_store(database_url)
    assert "newer stead (revision 9999" in str(refused.value)
    assert "\n" not in str(refused.value)
    with built.connect() as conn:  # nothing was written
        assert migrate.revisions(conn) == {"9999"}
    built.dispose()


async def _open_at_once(database_url: str, count: int) -> None:
    """``count`` processes' worth of stores opening ``database_url`` together, then closed."""
    stores = []

    async def start() -> None:
        stores.append(await open_store(database_url))

    async with anyio.create_task_group() as group:
        for _ in range(count):
            group.start_soon(start)
    for store in stores:
        await store.close()


@pytest.mark.parametrize("database_url", BACKENDS[1:], indirect=True)
async def test_starts_at_once_create_a_new_database_once(database_url: str) -> None:
    await _open_at_once(database_url, 4)
    built = engine(database_url)
    with built.connect() as conn:
        assert migrate.revisions(conn) == {migrate.HEAD}
        assert len(conn.execute(select(installation_secrets.c.name)).all()) == 1
        assert set(inspect(conn).get_table_names()) >= set(metadata.tables)
    built.dispose()


@pytest.mark.parametrize("database_url", BACKENDS[1:], indirect=True)
async def test_starts_at_once_migrate_an_old_database_once(database_url: str) -> None:
    _migrated_at(database_url, "0003").dispose()
    await _open_at_once(database_url, 3)
    built = engine(database_url)
    with built.connect() as conn:
        assert migrate.revisions(conn) == {migrate.HEAD}
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    built.dispose()


async def test_a_new_database_has_the_schema_the_migrations_build(tmp_path: Path) -> None:
    _migrated(tmp_path / "migrated.db").dispose()
    await (await open_store(f"sqlite:///{tmp_path / 'new.db'}")).close()
    assert _schema(tmp_path / "new.db") == _schema(tmp_path / "migrated.db")
    engine = create_engine(f"sqlite:///{tmp_path / 'new.db'}")
    with engine.connect() as conn:
        assert migrate.revisions(conn) == {migrate.HEAD}
        seeded = conn.execute(select(installation_secrets.c.name, installation_secrets.c.value))
        assert [(name, len(value)) for name, value in seeded] == [(migrate.CURSOR_SECRET, 32)]
    engine.dispose()


@pytest.mark.parametrize("existing", [False, True])
async def test_opening_a_new_or_current_database_imports_no_alembic(
    tmp_path: Path, existing: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    if existing:
        await (await open_store(url)).close()
    program = (
        "import sys, anyio; from stead.store import open_store_sync; "
        f"anyio.run(open_store_sync({url!r}).close); {NO_ALEMBIC}"
    )
    found = await anyio.run_process([sys.executable, "-c", program], check=True)
    assert found.stdout.decode().strip() == "[]"


@on_both
async def test_a_database_behind_head_is_migrated_and_reopens(database_url: str) -> None:
    built = _migrated_at(database_url, "0003")
    for _ in range(2):
        await (await open_store(database_url)).close()
    with built.connect() as conn:
        assert migrate.revisions(conn) == {migrate.HEAD}
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    built.dispose()


@on_both
async def test_the_monthly_totals_are_summed_from_the_ledger_on_upgrade(database_url: str) -> None:
    built = _migrated_at(database_url, "0015")
    stamp = datetime(2026, 3, 9, tzinfo=UTC)
    row = dict.fromkeys(LEDGER_COUNTERS, 0)
    with built.begin() as conn:
        conn.execute(insert(workspaces).values(id="wrkspc_a", name="a", created_at=stamp))
        for day, session, tokens, cost in [
            ("2026-02-27", "sesn_1", 5, 70),
            ("2026-03-01", "sesn_1", 7, 100),
            ("2026-03-08", "sesn_2", 11, 1000),
        ]:
            values = {**row, "input_tokens": tokens, "ephemeral_1h_input_tokens": 1}
            values |= {"list_cost_nanos": cost, "active_seconds": 0.5, "day": day}
            values |= {"workspace_id": "wrkspc_a", "session_id": session, "model": "m"}
            conn.execute(insert(usage_ledger).values(**values, updated_at=stamp))
    store = await open_store(database_url)
    try:
        march = await store.month_use("wrkspc_a", now=stamp)
        february = await store.month_use("wrkspc_a", now=datetime(2026, 2, 1, tzinfo=UTC))
    finally:
        await store.close()
        built.dispose()
    assert (march.tokens, march.list_cost_nanos, march.sandbox_seconds) == (20, 1100, 1.0)
    assert (february.tokens, february.list_cost_nanos, february.sandbox_seconds) == (6, 70, 0.5)


def _drop(
    built: Engine,
    tables: tuple[str, ...],
    indexes: tuple[str, ...] = (),
    columns: tuple[tuple[str, str], ...] = (),
) -> None:
    """Takes out of ``built`` what a database made by an earlier stead lacked."""
    with built.begin() as conn:
        for index in indexes:
            conn.execute(text(f"DROP INDEX {index}"))
        for table, column in columns:
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN {column}"))
        for table in tables:
            conn.execute(text(f"DROP TABLE {table}"))


@on_both
async def test_a_database_stamped_before_the_usage_ledger_was_numbered_0007_upgrades(
    database_url: str,
) -> None:
    """stead numbered the brains table 0008 after the work queue's 0006 while the
    usage ledger was being made 0007: a database made then is stamped 0008
    without the ledger, and migration 0019 sums the ledger."""
    built = _migrated_at(database_url, "0008")
    _drop(built, ("usage_ledger",))
    await (await open_store(database_url)).close()
    with built.connect() as conn:
        assert migrate.revisions(conn) == {migrate.HEAD}
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    built.dispose()


@on_both
@pytest.mark.parametrize("stamped", ["0019", "0022"])
async def test_a_database_stamped_0019_before_0016_to_0018_were_put_before_it_upgrades(
    database_url: str, stamped: str
) -> None:
    """For a while stead's 0019 followed 0015 (0016, 0017 and 0018 were put
    between them after): a database made or migrated then is stamped 0019
    without their tables and column, and later migrations went on from there."""
    built = _migrated_at(database_url, stamped)
    _drop(
        built,
        ("memory_mounts", "session_memory_stores", "session_repositories"),
        indexes=("ix_files_expires",),
        columns=(("files", "bytes_removed_at"),),
    )
    assert migrate.status(built).state is migrate.SchemaState.BEHIND
    await (await open_store(database_url)).close()
    with built.connect() as conn:
        assert migrate.revisions(conn) == {migrate.HEAD}
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    built.dispose()
