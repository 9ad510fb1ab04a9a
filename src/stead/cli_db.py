"""``stead db migrate`` and the schema line of ``stead db check``: where the
database stands against this stead's migrations, said in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import typer

from stead.cli_support import DataDir, database_named, made_data_dir, opened, read_settings
from stead.config import Settings

if TYPE_CHECKING:
    from stead.store import SchemaStatus


def schema_status(settings: Settings) -> SchemaStatus:
    """The database's schema status; one line and exit 2 if it cannot be read."""
    from stead.store import SchemaState, SchemaStatus, StoreUnavailable, schema_status_sync

    if settings.database_url is None and not settings.embedded_database.exists():
        return SchemaStatus(SchemaState.EMPTY, ())  # not made by asking
    try:
        return schema_status_sync(settings.resolved_database_url)
    except StoreUnavailable as exc:
        typer.echo(f"stead: {database_named(settings)}: {exc}", err=True)
        raise typer.Exit(2) from None


def db_migrate(data_dir: DataDir = None) -> None:
    """Create or migrate the database to this stead's schema (stead serve does it at start).

    Safe to run while other stead processes start: they migrate once, in turn.
    Exits 1 for a database migrated by a newer stead.
    """
    from stead.store import SchemaState

    settings = read_settings(data_dir=data_dir)
    before = schema_status(settings)
    if before.state is SchemaState.AHEAD:
        typer.echo(f"stead: {before.line()}", err=True)
        raise typer.Exit(1)
    if before.state is not SchemaState.CURRENT:
        if settings.database_url is None:  # the embedded database, as stead serve makes it
            made_data_dir(settings)
        anyio.run(_migrate, settings)
    done = {
        SchemaState.CURRENT: "already at",
        SchemaState.EMPTY: "created at",
        SchemaState.BEHIND: f"migrated from {', '.join(before.found) or 'none'} to",
    }[before.state]
    typer.echo(f"database {done} revision {before.head}")


async def _migrate(settings: Settings) -> None:
    async with opened(settings):  # opening migrates, under the store's migration lock
        pass
