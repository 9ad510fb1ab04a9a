"""What the ``stead`` commands share: settings read with one line per bad one,
the ``--data-dir`` option, the store opened for one command, printing."""

from __future__ import annotations

import ctypes
import gc
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError

from stead.config import Settings, settings_errors, unparsed_setting

if TYPE_CHECKING:
    from rich.console import Console

    from stead.store import Store
    from stead.vault import SecretBox

SettingsT = TypeVar("SettingsT", bound=BaseSettings)

# Plain help (no rich panels): flags show no type placeholder, and defaults
# and environment variables read as one line.
PLAIN: dict[str, Any] = {"no_args_is_help": True, "rich_markup_mode": None}


def setting_help(text: str, name: str) -> str:
    """``text`` with the setting's variable and default, which the option
    overrides (the option itself defaults to None: unset, the variable applies)."""
    default = Settings.model_fields[name].get_default(call_default_factory=True)
    return f"{text} [env var: STEAD_{name.upper()}; default: {default}]"


DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help=setting_help("Data directory.", "data_dir"))
]


def start_uncollected() -> None:
    """Called first by a command that runs for good (``serve``, ``sandbox-host``).

    What its start makes (modules, classes, routes, schemas: 110,000 objects
    for a server) lives as long as the process. Collections while it is made
    free almost nothing (a few hundred objects) and cost about a tenth of the
    start; ``freeze_start`` then moves it out of the collector's sight, where
    each full collection would walk it again with the event loop stopped (70 ms
    for a server, 23 ms for a sandbox host, on a 2-core machine)."""
    gc.disable()


M_ARENA_MAX = -8
"""glibc's ``mallopt`` parameter for the most malloc arenas (``malloc.h``)."""
SERVER_ARENAS = 2


def fewer_malloc_arenas() -> None:
    """Called first by ``serve``. glibc gives each thread that allocates an arena
    of its own, up to eight per core; a server's threads (the database's, the
    thread pool's) allocate little, yet each arena keeps its freed memory, about
    1.4 MB of a server's resident memory in all. Two arenas still spare the
    event loop's thread most waits for the malloc lock. Elsewhere than glibc
    this does nothing."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(M_ARENA_MAX, SERVER_ARENAS)
    except (OSError, AttributeError):
        pass


def without_pydantic_v1() -> None:
    """Called by ``serve`` before it imports the API. FastAPI imports
    ``pydantic.v1`` while it builds each route, only to refuse v1 models, and
    takes a ``pydantic.v1`` that cannot be imported as "no v1 model"; stead has
    none. A server would keep its 23 modules (1.5 MB) for good."""
    sys.modules.setdefault("pydantic.v1", None)  # type: ignore[arg-type]


def freeze_start() -> None:
    """Called once the start is made, before serving (see ``start_uncollected``)."""
    gc.freeze()
    gc.enable()


def console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def bold(text: str) -> str:
    return typer.style(text, bold=True)


def read_settings(**given: Any) -> Settings:
    return validated(Settings, **given)


def validated(kind: type[SettingsT], **given: Any) -> SettingsT:
    # Only options the user passed override the environment (STEAD_*).
    try:
        return kind(**{k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        lines = settings_errors(exc)
    except SettingsError as exc:  # a complex value (JSON) that does not parse
        lines = [unparsed_setting(exc)]
    for line in lines:
        typer.echo(f"stead: {line}", err=True)
    raise typer.Exit(2)


def made_data_dir(settings: Settings) -> None:
    """Makes the data directory; one line and exit when it cannot be one."""
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        typer.echo(f"stead: STEAD_DATA_DIR: cannot use {settings.data_dir}: {reason}", err=True)
        raise typer.Exit(2) from None


def database_named(settings: Settings) -> str:
    """How a line about the database names it: by STEAD_DATABASE_URL when that
    is set, else by the data directory's SQLite file (the data directory may
    come from --data-dir, STEAD_DATA_DIR or the default)."""
    if settings.database_url:
        return "STEAD_DATABASE_URL"
    return str(settings.embedded_database)


@asynccontextmanager
async def opened(settings: Settings) -> AsyncIterator[Store]:
    """The store ``settings`` name, migrated, for one command; closed on every path.
    A database that cannot be opened, or that does not serve a call in time (its
    transaction rolled back), stops the command with one line."""
    # Loaded here: the commands that need no store (the sandbox host above all,
    # a process that runs for good) start without SQLAlchemy.
    from stead.store import DatabaseBusy, StoreUnavailable, open_store

    try:
        store = await open_store(settings.resolved_database_url, settings.sqlite_synchronous)
    except StoreUnavailable as exc:
        typer.echo(f"stead: {database_named(settings)}: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        yield store
    except DatabaseBusy as exc:  # a lock not granted in time, a connection lost
        named = database_named(settings)
        typer.echo(f"stead: {named}: no answer in time, try again: {exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        await store.close()


async def chosen_workspace(store: Store, settings: Settings, workspace: str | None) -> str:
    """``workspace``, or the installation's first when None; one line and exit 1
    when there is no such workspace, as for any id the database does not hold
    (exit 2 is for a value no database could take)."""
    found = [w.id for w in await store.list_workspaces()]
    if workspace is None and found:
        return found[0]
    if workspace in found:
        return workspace
    problem = (
        "no workspace yet (stead keys create makes one)"
        if workspace is None
        else f"no workspace with id {workspace!r} in {settings.data_dir}"
    )
    typer.echo(f"stead: --workspace: {problem}", err=True)
    raise typer.Exit(1)


def shared_secret_key(settings: Settings) -> None:
    """On PostgreSQL every process opens every vault credential, so they share one
    key; a key file made in each data directory would differ between them. A
    command that made one would seal under it, or keep it as the database's key
    and lock every server out, so a command that seals stops here too."""
    from stead.store import single_brain

    if settings.secret_key is None and not single_brain(settings.resolved_database_url):
        typer.echo(
            "stead: STEAD_SECRET_KEY must be set on PostgreSQL: every stead serve of one "
            "database needs the same key (make one with: openssl rand -base64 32)",
            err=True,
        )
        raise typer.Exit(2)


async def sealing_box(settings: Settings, store: Store) -> SecretBox:
    """The box of the installation's key, once the database agrees it is the key
    its secrets are sealed under (``stead.vault.kept_key``); a key that cannot be
    used stops the command with one line."""
    from stead.vault import KeySetupError, check_kept_key, key_source, load_secret_box

    shared_secret_key(settings)
    try:
        box = load_secret_box(settings)
        await check_kept_key(store, box, key_source(settings))
    except KeySetupError as exc:
        typer.echo(f"stead: {exc}", err=True)
        raise typer.Exit(2) from None
    return box


async def stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


def _server_url(url: str) -> str:
    """The ``--url`` of a stead server, checked before anything dials it: one the
    clients cannot reach (no http(s) scheme or host, a bad port) ended in a
    traceback deep in them, or a worker retried it for good. The URL itself is
    not echoed: it may carry a password."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        reachable = parts.scheme in ("http", "https") and bool(parts.hostname)
        _ = parts.port  # raises for a port that is no number or out of range
    except ValueError as exc:
        problem = str(exc)
    else:
        if reachable:
            return url
        problem = "give the server's http:// or https:// address"
    typer.echo(f"stead: --url (or STEAD_URL): {problem}", err=True)
    raise typer.Exit(2)


def shown_server(url: str) -> str:
    """The ``--url`` as a message may print it: without a ``user:password@``."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host))


Url = Annotated[
    str,
    typer.Option(
        "--url",
        envvar="STEAD_URL",
        show_envvar=True,
        help="The stead server.",
        callback=_server_url,
    ),
]
ApiKeyOption = Annotated[
    str, typer.Option("--api-key", envvar="STEAD_API_KEY", show_envvar=True, help="API key.")
]


def existing(data_dir: Path | None) -> Settings:
    """The settings of a command that works on an installation's database: one
    that does not exist yet is a wrong ``--data-dir``, not a new installation."""
    settings = read_settings(data_dir=data_dir)
    if settings.database_url is None and not settings.embedded_database.exists():
        typer.echo(
            f"stead: no stead database in {settings.data_dir}; pass the --data-dir "
            "(or STEAD_DATA_DIR) that stead serve uses, or start stead serve there first",
            err=True,
        )
        raise typer.Exit(1)
    return settings
