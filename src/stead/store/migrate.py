"""Brings a database up to the head of the versioned Alembic migrations in ``migrations/``.

A database already at ``HEAD`` is recognised by one plain query, so a restart
does not import Alembic (a fifth of a second at every start); only a new or
older database runs the migrations.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).parent / "migrations"
HEAD = "0004"
"""The newest migration's revision; a test checks it is Alembic's head, so a new
migration that forgets to move it fails there."""
VERSION_TABLE = "alembic_version"


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def upgrade(engine: Engine) -> None:
    """Idempotent; concurrent callers serialise on the write lock."""
    with engine.connect() as conn:
        if revisions(conn) == {HEAD}:
            return
    from alembic import command

    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")


def revisions(conn: Connection) -> set[str]:
    """The revisions Alembic recorded in the database (none for a new one)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return set()
    return {str(row[0]) for row in conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))}
