"""Brings a database up to the head of the versioned Alembic migrations in ``migrations/``.

Alembic is imported only for a database that is behind: a database already at
``HEAD`` is recognised by one query, and a brand-new one is created straight
from ``tables/`` with what the migrations seed, then stamped ``HEAD`` (a test
checks that this gives the very schema the migrations build). Importing Alembic
costs a fifth of a second and 8 MB that a server would keep for its lifetime.

Concurrent starts migrate once: on SQLite they queue for the write lock, on
PostgreSQL for a transaction-scoped advisory lock; each checks the revision
again once it holds the lock, and creates or migrates in that transaction.
A database stamped with a revision this build does not know was migrated by a
newer stead: opening it fails (``StoreUnavailable``) before anything is written.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    insert,
    inspect,
    select,
    text,
)

from stead.store.errors import StoreUnavailable
from stead.store.tables import installation_secrets, metadata

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
HEAD = "0024"
"""The newest migration's revision; a test checks it is Alembic's head, so a new
migration that forgets to move it fails there."""
CURSOR_SECRET = "page_cursors"
MIGRATION_LOCK = 0x5374_6561_6400
"""PostgreSQL advisory lock key held while a database is created or migrated."""
MIGRATION_LOCK_TIMEOUT = "60s"

# Alembic's own version table, as it creates it.
version_table = Table(
    "alembic_version",
    MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def upgrade(engine: Engine) -> None:
    """Idempotent; concurrent callers serialise on the write lock (SQLite) or the
    advisory lock (PostgreSQL)."""
    with engine.connect() as conn:
        found = revisions(conn)
    check_known(found)
    if found == {HEAD}:
        return
    postgres = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        if postgres:
            conn.execute(text(f"SET LOCAL lock_timeout = '{MIGRATION_LOCK_TIMEOUT}'"))
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        # Checked again under the lock: another process may have been first.
        found = revisions(conn)
        check_known(found)
        if found == {HEAD}:
            return
        if not found and not inspect(conn).get_table_names():
            create(conn)
            return
        if postgres:  # DDL is transactional here: migrate under the lock just taken
            _run_migrations(conn)
            return
    with engine.begin() as conn:
        _run_migrations(conn)


def _run_migrations(conn: Connection) -> None:
    from alembic import command

    config = alembic_config()
    config.attributes["connection"] = conn
    command.upgrade(config, "head")


class SchemaState(StrEnum):
    CURRENT = "current"
    """At this stead's ``HEAD``."""
    BEHIND = "behind"
    """Made by an older stead: ``upgrade`` brings it to ``HEAD``."""
    AHEAD = "ahead"
    """Migrated by a newer stead: this one refuses it."""
    EMPTY = "empty"
    """No stead schema yet: ``upgrade`` creates it."""


@dataclass(frozen=True)
class SchemaStatus:
    state: SchemaState
    found: tuple[str, ...]
    """The revisions recorded in the database (none for an empty one)."""
    head: str = HEAD
    """This stead's newest revision."""

    def line(self) -> str:
        """The status in one line for an operator."""
        found = ", ".join(self.found)
        if self.state is SchemaState.CURRENT:
            return f"schema at revision {self.head}, this stead's"
        if self.state is SchemaState.EMPTY:
            return "no stead schema yet: stead db migrate (or stead serve) creates it"
        if self.state is SchemaState.BEHIND:
            return (
                f"schema behind: revision {found or 'none'}, this stead's is {self.head}: "
                "run stead db migrate (stead serve migrates it too)"
            )
        return (
            f"schema ahead: revision {found} was made by a newer stead (this one knows up "
            f"to {self.head}): run the newer stead, or restore a backup"
        )


def status(engine: Engine) -> SchemaStatus:
    """Where the database stands against ``HEAD``; reads only."""
    with engine.connect() as conn:
        found = revisions(conn)
        empty = not found and not inspect(conn).get_table_names()
    if found - set(known_revisions()):
        state = SchemaState.AHEAD
    elif found == {HEAD}:
        state = SchemaState.CURRENT
    elif empty:
        state = SchemaState.EMPTY
    else:
        state = SchemaState.BEHIND
    return SchemaStatus(state, tuple(sorted(found)))


def known_revisions() -> list[str]:
    """This build's revisions, oldest first, read from the migration files' names
    (``NNNN_what.py``) rather than by importing Alembic."""
    return sorted(path.name[:4] for path in (MIGRATIONS / "versions").glob("[0-9]*_*.py"))


def check_known(found: set[str]) -> None:
    unknown = sorted(found - set(known_revisions()))
    if unknown:
        raise StoreUnavailable(
            f"the database was migrated by a newer stead (revision {', '.join(unknown)}; "
            f"this stead knows up to {HEAD}): run the newer stead, or restore a backup"
        )


def create(conn: Connection) -> None:
    """Makes an empty database what running every migration would make it."""
    metadata.create_all(conn)
    seed(conn)
    version_table.create(conn)
    conn.execute(insert(version_table).values(version_num=HEAD))


def seed(conn: Connection) -> None:
    """The rows the migrations make in an empty database, as migration 0004 seeds
    them: the page cursors' HMAC key, made here so that a server's start never writes."""
    created = datetime.now(UTC)
    secret = {"name": CURSOR_SECRET, "value": secrets.token_bytes(32), "created_at": created}
    conn.execute(insert(installation_secrets).values(secret))


def revisions(conn: Connection) -> set[str]:
    """The revisions Alembic recorded in the database (none for a new one)."""
    if not inspect(conn).has_table(version_table.name):
        return set()
    return {str(v) for v in conn.execute(select(version_table.c.version_num)).scalars()}
