"""The ``stead`` command: serve the API, run or stop the sandbox host, manage API
keys, check the database, reach a sandbox (``exec``, ``shell``)."""

from __future__ import annotations

import copy
import errno
import shlex
import signal
import socket
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer
from typer.main import get_command_name

from stead.cli_db import db_migrate, schema_status
from stead.cli_host import sandbox_host_app
from stead.cli_keys import keys_app
from stead.cli_limits import limits_app
from stead.cli_support import (
    PLAIN,
    ApiKeyOption,
    DataDir,
    Url,
    bold,
    console,
    existing,
    fewer_malloc_arenas,
    freeze_start,
    made_data_dir,
    opened,
    read_settings,
    sealing_box,
    setting_help,
    shared_secret_key,
    shown_server,
    start_uncollected,
    validated,
    without_pydantic_v1,
)
from stead.cli_usage import usage
from stead.cli_webhooks import webhooks_app
from stead.cli_worker import worker
from stead.config import Settings
from stead.startup import summary
from stead.vault import (
    KeySetupError,
    SealError,
    SecretBox,
    check_kept_key,
    keep_key,
    kept_key_id,
    key_source,
    load_secret_box,
)
from stead.vault.keys import begin_file_rotation, finish_file_rotation

if TYPE_CHECKING:
    from stead.store import ApiKey, BrainRecord, IntegrityFinding
    from stead.telemetry import Telemetry

app = typer.Typer(help="stead: a self-hosted runtime for the Claude Managed Agents API.", **PLAIN)
app.add_typer(keys_app, name="keys")
app.add_typer(limits_app, name="limits")
app.add_typer(webhooks_app, name="webhooks")
db_app = typer.Typer(help="The data directory's database.", **PLAIN)
app.add_typer(db_app, name="db")
db_app.command("migrate")(db_migrate)
secrets_app = typer.Typer(help="The key that seals vault credentials.", **PLAIN)
app.add_typer(secrets_app, name="secrets")
app.add_typer(sandbox_host_app, name="sandbox-host")
app.command()(worker)
app.command()(usage)


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        typer.echo(f"stead {version('stead')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_version, is_eager=True
        ),
    ] = False,
) -> None:
    """stead: a self-hosted runtime for the Claude Managed Agents API."""


async def _checked_store(settings: Settings) -> None:
    """The store migrated, and the key it holds secrets under checked."""
    async with opened(settings) as store:
        await sealing_box(settings, store)


async def _first_key(settings: Settings) -> tuple[ApiKey, str] | None:
    async with opened(settings) as store:
        return await store.first_api_key("default", "first key")


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help=setting_help("Interface to bind.", "host"))
    ] = None,
    port: Annotated[int | None, typer.Option(help=setting_help("Port.", "port"))] = None,
    data_dir: DataDir = None,
) -> None:
    """Serve the Managed Agents API on the embedded store."""
    start_uncollected()
    fewer_malloc_arenas()
    without_pydantic_v1()
    import uvicorn

    from stead.api import create_app
    from stead.api.server import Server
    from stead.telemetry import configure_logging

    settings = read_settings(host=host, port=port, data_dir=data_dir)
    if settings.sandbox == "bwrap" and settings.sandbox_host_autostart:
        # The host this server may start reads the same variables; bad ones
        # stop start-up here, not later in the host's log.
        from stead.sandbox_host.settings import HostSettings

        validated(HostSettings, data_dir=data_dir)
    shared_secret_key(settings)
    made_data_dir(settings)
    _secret_box(settings)
    configure_logging(settings.log_level, settings.log_format)
    telemetry = _telemetry(settings)
    # The data directory and the port are taken before anything is written:
    # a start that fails on either must not spend the shown-once first key.
    with _data_dir_lock(settings), _listening(settings) as sock:
        # Migrations may take long: a stop asked for meanwhile is not held back.
        anyio.run(_checked_store, settings)
        host = f"[{settings.host}]" if ":" in settings.host else settings.host
        url = f"http://{host}:{settings.port}"
        # A stop asked for while the first key is made waits until it is shown
        # (click flushes each line): killed between, the key is spent unseen.
        with _stops_held():
            created = anyio.run(_first_key, settings)
            # Plain click output: rich (40 modules, 1.5 MB) is for the commands that
            # print tables and errors, and a server keeps what it imports.
            typer.echo(f"stead serves the Managed Agents API at {bold(url)}")
            typer.echo(f"data directory: {settings.data_dir}")
            if created is not None:
                key, secret = created
                typer.echo(f"first API key (shown once, store it now): {bold(secret)}")
                typer.echo(f"  workspace {key.workspace_id}, key {key.id}")
        if created is None:
            typer.echo(f"make an API key with: stead keys create --data-dir {settings.data_dir}")
        typer.echo(f'use it: anthropic.Anthropic(base_url="{url}", api_key=KEY)')
        for line in summary(settings):
            typer.echo(line)
        config = uvicorn.Config(
            # data_dir_locked: by _data_dir_lock, when it applies
            create_app(settings, data_dir_locked=True, telemetry=telemetry),
            host=settings.host,
            port=settings.port,
            loop="uvloop",
            http="httptools",
            log_level=settings.log_level,
            # Our handler formats uvicorn's lines too (JSON, WebSocket queries cut);
            # the access log is stead's own (stead.access), by route template.
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=3,
        )
        freeze_start()
        Server(config).run(sockets=[sock])


def _telemetry(settings: Settings) -> Telemetry:
    """The server's metrics and tracer; one line and exit for an ``OTEL_*``
    value the OpenTelemetry SDK refuses, before the first key is made."""
    from stead.telemetry import Metrics, Telemetry, TracingSettingError, open_tracing

    try:
        return Telemetry(Metrics(), open_tracing(settings))
    except TracingSettingError as exc:
        typer.echo(f"stead: {exc}", err=True)
        raise typer.Exit(2) from None


@contextmanager
def _stops_held() -> Iterator[None]:
    """SIGTERM and SIGINT wait (blocked, then delivered as usual) while inside."""
    stops = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)


@contextmanager
def _data_dir_lock(settings: Settings) -> Iterator[None]:
    """The one-brain lock of a SQLite store's data directory (none on PostgreSQL)."""
    from stead.runtime import DataDirInUse, brain_lock
    from stead.store import single_brain

    if not single_brain(settings.resolved_database_url):
        yield
        return
    try:
        with brain_lock(settings.data_dir, settings.sqlite_file):
            yield
    except DataDirInUse as exc:
        typer.echo(f"stead: {exc}", err=True)
        raise typer.Exit(1) from None


@contextmanager
def _listening(settings: Settings) -> Iterator[socket.socket]:
    """The server's listening socket, bound now; one line and exit if it cannot be."""
    where = f"{settings.host}:{settings.port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            settings.host, settings.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        typer.echo(f"stead: cannot listen on {where}: {exc}", err=True)
        raise typer.Exit(1) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        hint = " (another server uses it? pick one with --port or STEAD_PORT)"
        taken = exc.errno == errno.EADDRINUSE
        typer.echo(f"stead: cannot listen on {where}: {reason}{hint if taken else ''}", err=True)
        raise typer.Exit(1) from None
    with sock:
        yield sock


@db_app.command("check")
def db_check(
    repair: Annotated[
        bool, typer.Option("--repair", help="Rewrite the stored values it can repair.")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Check the database: its schema revision against this stead's, the engine's
    integrity checks and stored values no read can render.

    Exits 1 if the schema is not this stead's (behind: run stead db migrate; ahead:
    made by a newer stead) or a problem remains (with --repair: one it could not
    repair); 2 if the database cannot be reached.
    """
    from stead.store import SchemaState, shown_url

    settings = read_settings(data_dir=data_dir)
    schema = schema_status(settings)
    if schema.state is not SchemaState.CURRENT:
        typer.echo(f"stead: {schema.line()}", err=True)
        raise typer.Exit(1)
    console().print(schema.line())
    findings = anyio.run(_check_store, settings, repair)
    for finding in findings:
        console().print(str(finding))
    left = [f for f in findings if not f.repaired]
    if not findings:
        console().print(f"{shown_url(settings.resolved_database_url)}: no problems found")
    elif left:
        hint = "" if repair else " (run again with --repair to fix stored values)"
        console().print(f"{len(left)} problem(s) left{hint}")
        raise typer.Exit(1)


@db_app.command("brains")
def db_brains(data_dir: DataDir = None) -> None:
    """List the stead serve processes of a shared (PostgreSQL) store and their heartbeats.

    A process is "alive" while it beats, "stale" once silent for
    STEAD_BRAIN_STALE_SECONDS (its runs go to the others), "stopped" after a
    clean stop. On SQLite one process owns the store and none is listed.
    """
    settings = existing(data_dir)
    brains = anyio.run(_list_brains, settings)
    if not brains:
        typer.echo("no processes recorded (on SQLite, the one stead serve owns the store)")
        return
    now = datetime.now(UTC)
    stale = timedelta(seconds=settings.brain_stale_seconds)
    header = ("id", "host", "pid", "started", "heartbeat", "state")
    lines = [header] + [
        (
            b.id,
            b.host,
            str(b.pid),
            b.started_at.isoformat()[:19],
            f"{(now - b.heartbeat_at).total_seconds():.1f}s ago",
            "stopped" if b.stopped_at else "stale" if now - b.heartbeat_at > stale else "alive",
        )
        for b in brains
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


async def _list_brains(settings: Settings) -> list[BrainRecord]:
    async with opened(settings) as store:
        return await store.list_brains()


async def _check_store(settings: Settings, repair: bool) -> list[IntegrityFinding]:
    async with opened(settings) as store:
        return await store.check_integrity(repair)


def _key_settings(data_dir: DataDir) -> Settings:
    """The settings of a command on the installation's key, its data directory
    made; on PostgreSQL without STEAD_SECRET_KEY it stops before a key file is
    (``shared_secret_key``)."""
    settings = existing(data_dir)
    shared_secret_key(settings)
    made_data_dir(settings)
    return settings


def _secret_box(settings: Settings) -> SecretBox:
    try:
        return load_secret_box(settings)
    except KeySetupError as exc:
        typer.echo(f"stead: {exc}", err=True)
        raise typer.Exit(2) from None


@secrets_app.command("rotate-key")
def secrets_rotate_key(data_dir: DataDir = None) -> None:
    """Re-seal every vault credential, webhook signing secret and repository token
    under a new key.
    Stop `stead serve` first: with SQLite, this refuses to run beside it; on
    PostgreSQL a server left on the old key stores no secret once this has run
    (restart it with the new key).

    With the key file (the default), a new key is made and replaces
    <data dir>/secret.key once every credential is re-sealed; a run that was
    interrupted is finished by running it again. With STEAD_SECRET_KEY, set it
    to the new key and STEAD_SECRET_KEY_PREVIOUS to the old one, run this, then
    drop STEAD_SECRET_KEY_PREVIOUS.
    """
    settings = _key_settings(data_dir)
    # A server left on the old key stores no secret once the key has moved
    # (the store checks every sealed value against the database's key), but on
    # SQLite nothing runs beside the rotation at all.
    with _data_dir_lock(settings):
        _rotate_key(settings)


def _rotate_key(settings: Settings) -> None:
    if settings.secret_key is not None:
        if settings.secret_key_previous is None:
            typer.echo(
                "stead: STEAD_SECRET_KEY is set: set it to the new key and "
                "STEAD_SECRET_KEY_PREVIOUS to the old one, then run this again",
                err=True,
            )
            raise typer.Exit(2)
        box = _secret_box(settings)
    else:
        _secret_box(settings)  # the current key file exists and is usable
        box = begin_file_rotation(settings.data_dir)
    try:
        count, hooks, tokens = anyio.run(_reseal, settings, box)
    except SealError as exc:
        typer.echo(f"stead: a credential cannot be opened: {exc}", err=True)
        raise typer.Exit(1) from None
    if settings.secret_key is None:
        finish_file_rotation(settings.data_dir)
    console().print(
        f"re-sealed {count} credential(s), {hooks} webhook secret(s) and {tokens} "
        f"repository token(s) under key {box.key_id.hex()}"
    )


async def _reseal(settings: Settings, box: SecretBox) -> tuple[int, int, int]:
    def again(bound_to: str, sealed: bytes) -> bytes | None:
        if box.sealed_by_current_key(sealed):
            return None
        return box.seal(bound_to, box.open(bound_to, sealed))

    from stead.runtime import resealed  # loaded only by this command

    async with opened(settings) as store:
        try:
            await check_kept_key(store, box, key_source(settings))
        except KeySetupError as exc:
            typer.echo(f"stead: {exc}", err=True)
            raise typer.Exit(2) from None
        # The new key is the database's before anything is sealed under it: from
        # then on a process still on the old key stores no secret (the store
        # refuses it), and what such a process stored before is re-sealed here.
        await keep_key(store, box)
        credentials = await store.reseal_credentials(lambda c: again(c.id, c.sealed))
        hooks = await store.reseal_webhook_secrets(partial(resealed, box))
        tokens = await store.reseal_repository_tokens(again)
        return credentials, hooks, tokens


@secrets_app.command("forget-key")
def secrets_forget_key(
    lost: Annotated[
        str,
        typer.Option(
            "--lost", help="The id of the lost key, as the refusal to start names it (hex)."
        ),
    ],
    data_dir: DataDir = None,
) -> None:
    """Make the installation's key the database's after the key its secrets were
    sealed under was lost. What the lost key sealed (vault credentials, webhook
    signing secrets, repository tokens) stays unreadable: create those again.
    """
    settings = _key_settings(data_dir)
    box = _secret_box(settings)
    named = lost.strip().lower()

    async def forget() -> bytes:
        """The id the database kept; replaced by this key's when it is ``named``."""
        async with opened(settings) as store:
            kept = await kept_key_id(store, box)
            if not box.holds(kept) and kept.hex() == named:
                await keep_key(store, box)
            return kept

    with _data_dir_lock(settings):
        kept = anyio.run(forget)
    if box.holds(kept):
        console().print(f"the database's key is already this one ({box.key_id.hex()})")
    elif kept.hex() != named:
        typer.echo(f"stead: the database's key is {kept.hex()}, not {lost}", err=True)
        raise typer.Exit(2)
    else:
        console().print(f"the database's key is now {box.key_id.hex()} (was {kept.hex()})")


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_command(
    session_id: Annotated[str, typer.Argument(help="The session whose sandbox runs it.")],
    command: Annotated[list[str], typer.Argument(help="The command, after --.")],
    url: Url = "http://127.0.0.1:8787",
    api_key: ApiKeyOption = "",
) -> None:
    """Run a command in a session's sandbox, stream its output, exit with its code."""
    from stead.client.console import run_exec

    code = _run_client(run_exec, url, api_key, session_id, shlex.join(command))
    raise typer.Exit(code)


@app.command()
def shell(
    session_id: Annotated[str, typer.Argument(help="The session whose sandbox to enter.")],
    terminal_id: Annotated[
        str | None, typer.Option("--id", help="Attach to this shell again (it outlives you).")
    ] = None,
    url: Url = "http://127.0.0.1:8787",
    api_key: ApiKeyOption = "",
) -> None:
    """An interactive shell in a session's sandbox that survives disconnects."""
    from stead.client.console import run_shell

    raise typer.Exit(_run_client(run_shell, url, api_key, session_id, terminal_id))


def _run_client(function: Any, url: str, api_key: str, *args: Any) -> int:
    from stead.client import TerminalError

    if not api_key:
        console().print("stead: give an API key with --api-key or STEAD_API_KEY", style="red")
        return 2
    try:
        return int(anyio.run(function, url, api_key, *args))
    except TerminalError as exc:
        console().print(f"stead: {exc}", style="red")
        return 1
    except OSError as exc:
        console().print(f"stead: cannot reach {shown_server(url)}: {exc}", style="red")
        return 1


@app.command()
def demo() -> None:
    """Run one short agent session offline with a scripted model and print its events."""
    from stead.demo import run_demo

    run_demo(console())


def main() -> None:
    for_command(sys.argv[1:])()


def for_command(args: Sequence[str]) -> typer.Typer:
    """``app`` with only the command or group ``args`` start with, when they name
    one: typer builds every command's options on each call (27 ms on a 2-core
    machine, which ``stead serve`` pays at start), and the one asked for is all
    that is run. The whole app for anything else (help, no command, a typo)."""
    name = args[0] if args else ""
    commands = [
        c
        for c in app.registered_commands
        if (c.name or get_command_name(getattr(c.callback, "__name__", ""))) == name
    ]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    focused = copy.copy(app)
    focused.registered_commands = commands
    focused.registered_groups = groups
    return focused
