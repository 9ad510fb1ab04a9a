"""The ``stead`` command: serve the API, manage API keys, check the database."""

from __future__ import annotations

import errno
import json
import logging
import os
import shlex
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError

from stead.config import Settings, settings_errors, unparsed_setting
from stead.startup import summary
from stead.store import (
    ApiKey,
    CredentialRecord,
    IntegrityFinding,
    Store,
    StoreUnavailable,
    open_store,
)
from stead.vault import KeySetupError, SealError, SecretBox, load_secret_box
from stead.vault.keys import begin_file_rotation, finish_file_rotation

if TYPE_CHECKING:
    from rich.console import Console

SettingsT = TypeVar("SettingsT", bound=BaseSettings)

# Plain help (no rich panels): flags show no type placeholder, and defaults
# and environment variables read as one line.
PLAIN: dict[str, Any] = {"no_args_is_help": True, "rich_markup_mode": None}
app = typer.Typer(help="stead: a self-hosted runtime for the Claude Managed Agents API.", **PLAIN)
keys_app = typer.Typer(help="API keys: each belongs to one workspace.", **PLAIN)
app.add_typer(keys_app, name="keys")
db_app = typer.Typer(help="The data directory's database.", **PLAIN)
app.add_typer(db_app, name="db")
secrets_app = typer.Typer(help="The key that seals vault credentials.", **PLAIN)
app.add_typer(secrets_app, name="secrets")


def _setting_help(text: str, name: str) -> str:
    """``text`` with the setting's variable and default, which the option
    overrides (the option itself defaults to None: unset, the variable applies)."""
    default = Settings.model_fields[name].get_default(call_default_factory=True)
    return f"{text} [env var: STEAD_{name.upper()}; default: {default}]"


DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help=_setting_help("Data directory.", "data_dir"))
]


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


def _console() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)


def _bold(text: str) -> str:
    return typer.style(text, bold=True)


def _settings(**given: Any) -> Settings:
    return _validated(Settings, **given)


def _validated(kind: type[SettingsT], **given: Any) -> SettingsT:
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


@asynccontextmanager
async def _opened(settings: Settings) -> AsyncIterator[Store]:
    """The store ``settings`` name, migrated, for one command; closed on every path.
    A database that cannot be opened stops the command with one line."""
    try:
        store = await open_store(settings.resolved_database_url, settings.sqlite_synchronous)
    except StoreUnavailable as exc:
        typer.echo(f"stead: STEAD_DATABASE_URL: {exc}", err=True)
        raise typer.Exit(2) from None
    try:
        yield store
    finally:
        await store.close()


async def _first_key(settings: Settings) -> tuple[ApiKey, str] | None:
    async with _opened(settings) as store:
        if await store.count_api_keys():
            return None
        workspace = await store.create_workspace("default")
        return await store.create_api_key(workspace.id, "first key")


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help=_setting_help("Interface to bind.", "host"))
    ] = None,
    port: Annotated[int | None, typer.Option(help=_setting_help("Port.", "port"))] = None,
    data_dir: DataDir = None,
) -> None:
    """Serve the Managed Agents API on the embedded store."""
    import uvicorn

    from stead.api import create_app

    settings = _settings(host=host, port=port, data_dir=data_dir)
    if settings.sandbox == "bwrap" and settings.sandbox_host_autostart:
        # The host this server may start reads the same variables; bad ones
        # stop start-up here, not later in the host's log.
        from stead.sandbox_host.settings import HostSettings

        _validated(HostSettings, data_dir=data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    _secret_box(settings)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # httpx logs every request's URL at info; web_fetch URLs are the model's to
    # write (query strings and all), and the brain logs no URL it was given.
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    # The data directory and the port are taken before anything is written:
    # a start that fails on either must not spend the shown-once first key.
    with _data_dir_lock(settings), _listening(settings) as sock:
        created = anyio.run(_first_key, settings)
        url = f"http://{settings.host}:{settings.port}"
        # Plain click output: rich (40 modules, 1.5 MB) is for the commands that
        # print tables and errors, and a server keeps what it imports.
        typer.echo(f"stead serves the Managed Agents API at {_bold(url)}")
        typer.echo(f"data directory: {settings.data_dir}")
        if created is not None:
            key, secret = created
            typer.echo(f"first API key (shown once, store it now): {_bold(secret)}")
            typer.echo(f"  workspace {key.workspace_id}, key {key.id}")
        else:
            typer.echo(f"make an API key with: stead keys create --data-dir {settings.data_dir}")
        typer.echo(f'use it: anthropic.Anthropic(base_url="{url}", api_key=KEY)')
        for line in summary(settings):
            typer.echo(line)
        config = uvicorn.Config(
            create_app(settings, data_dir_locked=True),  # by _data_dir_lock, when it applies
            host=settings.host,
            port=settings.port,
            loop="uvloop",
            http="httptools",
            log_level=settings.log_level,
            access_log=False,
            timeout_graceful_shutdown=3,
        )
        uvicorn.Server(config).run(sockets=[sock])


@contextmanager
def _data_dir_lock(settings: Settings) -> Iterator[None]:
    """The one-brain lock of a SQLite store's data directory (none on PostgreSQL)."""
    from stead.runtime import DataDirInUse, brain_lock
    from stead.store import single_brain

    if not single_brain(settings.resolved_database_url):
        yield
        return
    try:
        with brain_lock(settings.data_dir):
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


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Option(help="A label for the key.")] = "key",
    workspace: Annotated[
        str | None, typer.Option(help="Workspace id; default: the first workspace.")
    ] = None,
    new_workspace: Annotated[
        str | None, typer.Option(help="Create a new workspace with this name for the key.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Create an API key and print it (it is shown only once)."""
    settings = _existing(data_dir)
    key, secret = anyio.run(_create_key, settings, name, workspace, new_workspace)
    if as_json:
        print(json.dumps({"id": key.id, "workspace_id": key.workspace_id, "key": secret}))
    else:
        _console().print(
            f"{secret}\n  workspace {key.workspace_id}, key {key.id} (shown once), "
            f"in {settings.data_dir}"
        )


async def _create_key(
    settings: Settings, name: str, workspace: str | None, new_workspace: str | None
) -> tuple[ApiKey, str]:
    async with _opened(settings) as store:
        if new_workspace is not None:
            workspace = (await store.create_workspace(new_workspace)).id
        elif workspace is None:
            existing = await store.list_workspaces()
            workspace = existing[0].id if existing else (await store.create_workspace("default")).id
        return await store.create_api_key(workspace, name)


@keys_app.command("list")
def keys_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    data_dir: DataDir = None,
) -> None:
    """List the API keys of every workspace (never their secrets)."""
    settings = _existing(data_dir)
    keys = anyio.run(_list_keys, settings)
    rows = [
        {
            "id": k.id,
            "workspace_id": k.workspace_id,
            "name": k.name,
            "ends_with": k.hint,
            "created_at": k.created_at.isoformat(),
            "revoked_at": None if k.revoked_at is None else k.revoked_at.isoformat(),
        }
        for k in keys
    ]
    if as_json:
        print(json.dumps(rows))
        return
    from rich.table import Table

    table = Table("id", "workspace", "name", "ends with", "created", "revoked")
    for row in rows:
        created, revoked = row["created_at"], row["revoked_at"]
        table.add_row(
            row["id"], row["workspace_id"], row["name"], f"…{row['ends_with']}",
            str(created)[:19], str(revoked)[:19] if revoked else "",
        )  # fmt: skip
    _console().print(table)


async def _list_keys(settings: Settings) -> list[ApiKey]:
    async with _opened(settings) as store:
        return await store.list_api_keys()


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (see stead keys list).")],
    data_dir: DataDir = None,
) -> None:
    """Revoke an API key. Running servers refuse it within STEAD_AUTH_CACHE_SECONDS."""
    from stead.store import NotFound

    settings = _existing(data_dir)
    try:
        key = anyio.run(_revoke_key, settings, key_id)
    except NotFound:
        typer.echo(f"stead: no API key {key_id} in {settings.data_dir}", err=True)
        raise typer.Exit(1) from None
    assert key.revoked_at is not None
    typer.echo(f"revoked {key.id} (workspace {key.workspace_id}) at {key.revoked_at.isoformat()}")


async def _revoke_key(settings: Settings, key_id: str) -> ApiKey:
    async with _opened(settings) as store:
        return await store.revoke_api_key(key_id)


def _existing(data_dir: Path | None) -> Settings:
    """The settings of a command that works on an installation's database: one
    that does not exist yet is a wrong ``--data-dir``, not a new installation."""
    settings = _settings(data_dir=data_dir)
    embedded = settings.database_url is None
    if embedded and not (settings.data_dir / "stead.db").exists():
        typer.echo(
            f"stead: no stead database in {settings.data_dir}; pass the --data-dir "
            "(or STEAD_DATA_DIR) that stead serve uses, or start stead serve there first",
            err=True,
        )
        raise typer.Exit(1)
    return settings


@db_app.command("check")
def db_check(
    repair: Annotated[
        bool, typer.Option("--repair", help="Rewrite the stored values it can repair.")
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Check the database: the engine's integrity checks and stored values no read can render.

    Exits 1 if a problem remains (with --repair: one it could not repair).
    """
    settings = _settings(data_dir=data_dir)
    findings = anyio.run(_check_store, settings, repair)
    for finding in findings:
        _console().print(str(finding))
    left = [f for f in findings if not f.repaired]
    if not findings:
        _console().print(f"{settings.resolved_database_url}: no problems found")
    elif left:
        hint = "" if repair else " (run again with --repair to fix stored values)"
        _console().print(f"{len(left)} problem(s) left{hint}")
        raise typer.Exit(1)


async def _check_store(settings: Settings, repair: bool) -> list[IntegrityFinding]:
    async with _opened(settings) as store:
        return await store.check_integrity(repair)


def _secret_box(settings: Settings) -> SecretBox:
    try:
        return load_secret_box(settings)
    except KeySetupError as exc:
        typer.echo(f"stead: {exc}", err=True)
        raise typer.Exit(2) from None


@secrets_app.command("rotate-key")
def secrets_rotate_key(data_dir: DataDir = None) -> None:
    """Re-seal every vault credential under a new key. Stop `stead serve` first.

    With the key file (the default), a new key is made and replaces
    <data dir>/secret.key once every credential is re-sealed; a run that was
    interrupted is finished by running it again. With STEAD_SECRET_KEY, set it
    to the new key and STEAD_SECRET_KEY_PREVIOUS to the old one, run this, then
    drop STEAD_SECRET_KEY_PREVIOUS.
    """
    settings = _settings(data_dir=data_dir)
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
        count = anyio.run(_reseal, settings, box)
    except SealError as exc:
        typer.echo(f"stead: a credential cannot be opened: {exc}", err=True)
        raise typer.Exit(1) from None
    if settings.secret_key is None:
        finish_file_rotation(settings.data_dir)
    _console().print(f"re-sealed {count} credential(s) under key {box.key_id.hex()}")


async def _reseal(settings: Settings, box: SecretBox) -> int:
    def reseal(credential: CredentialRecord) -> bytes | None:
        if box.sealed_by_current_key(credential.sealed):
            return None
        return box.seal(credential.id, box.open(credential.id, credential.sealed))

    async with _opened(settings) as store:
        return await store.reseal_credentials(reseal)


@app.command("sandbox-host")
def sandbox_host(data_dir: DataDir = None) -> None:
    """Run the sandbox host: owns every sandbox on this machine, outlives `stead serve`.

    `stead serve` starts one by itself when none answers; run it yourself to
    keep it under a service manager or to serve a remote brain
    (STEAD_SANDBOX_HOST_LISTEN_TCP with STEAD_SANDBOX_HOST_TOKEN).
    """
    from stead.sandbox_host.server import HostAlreadyRunning, serve_host
    from stead.sandbox_host.settings import HostSettings

    settings = _validated(HostSettings, data_dir=data_dir)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    options = settings.options()
    if os.geteuid() == 0:
        # Root's groups would count in the file checks the host makes as a
        # sandbox's user (stead.sandbox.local.actas); it needs none of them.
        os.setgroups([])

    async def run() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_stop_on_signal, tasks.cancel_scope)
            await serve_host(options)

    try:
        anyio.run(run, backend_options={"use_uvloop": True})
    except HostAlreadyRunning as exc:
        _console().print(f"stead sandbox-host: {exc}")
        raise typer.Exit(1) from None


async def _stop_on_signal(scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


Url = Annotated[
    str, typer.Option("--url", envvar="STEAD_URL", show_envvar=True, help="The stead server.")
]
ApiKeyOption = Annotated[
    str, typer.Option("--api-key", envvar="STEAD_API_KEY", show_envvar=True, help="API key.")
]


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
        _console().print("stead: give an API key with --api-key or STEAD_API_KEY", style="red")
        return 2
    try:
        return int(anyio.run(function, url, api_key, *args))
    except TerminalError as exc:
        _console().print(f"stead: {exc}", style="red")
        return 1
    except OSError as exc:
        _console().print(f"stead: cannot reach {url}: {exc}", style="red")
        return 1


@app.command()
def demo() -> None:
    """Run one short agent session offline with a scripted model and print its events."""
    from stead.demo import run_demo

    run_demo(_console())


def main() -> None:
    app()
