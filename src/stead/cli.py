"""The ``stead`` command: serve the API, manage API keys, check the database."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings

from stead.config import Settings, settings_errors
from stead.store import ApiKey, CredentialRecord, IntegrityFinding, Store, open_store
from stead.vault import KeySetupError, SealError, SecretBox, load_secret_box
from stead.vault.keys import begin_file_rotation, finish_file_rotation

if TYPE_CHECKING:
    from rich.console import Console

SettingsT = TypeVar("SettingsT", bound=BaseSettings)

app = typer.Typer(
    help="stead: a self-hosted runtime for the Claude Managed Agents API.", no_args_is_help=True
)
keys_app = typer.Typer(help="API keys: each belongs to one workspace.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
db_app = typer.Typer(help="The data directory's database.", no_args_is_help=True)
app.add_typer(db_app, name="db")
secrets_app = typer.Typer(help="The key that seals vault credentials.", no_args_is_help=True)
app.add_typer(secrets_app, name="secrets")

DataDir = Annotated[
    Path | None, typer.Option("--data-dir", help="Data directory (env STEAD_DATA_DIR).")
]


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
        for line in settings_errors(exc):
            typer.echo(f"stead: {line}", err=True)
        raise typer.Exit(2) from None


@asynccontextmanager
async def _opened(settings: Settings) -> AsyncIterator[Store]:
    """The store ``settings`` name, migrated, for one command; closed on every path."""
    store = await open_store(settings.resolved_database_url, settings.sqlite_synchronous)
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
    host: Annotated[str | None, typer.Option(help="Interface to bind (env STEAD_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (env STEAD_PORT).")] = None,
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
        typer.echo("make an API key with: stead keys create")
    typer.echo(f'use it: anthropic.Anthropic(base_url="{url}", api_key=KEY)')
    config = uvicorn.Config(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_level=settings.log_level,
        access_log=False,
        timeout_graceful_shutdown=3,
    )
    uvicorn.Server(config).run()


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
    settings = _settings(data_dir=data_dir)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    key, secret = anyio.run(_create_key, settings, name, workspace, new_workspace)
    if as_json:
        print(json.dumps({"id": key.id, "workspace_id": key.workspace_id, "key": secret}))
    else:
        _console().print(f"{secret}\n  workspace {key.workspace_id}, key {key.id} (shown once)")


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
    str, typer.Option("--url", envvar="STEAD_URL", help="The stead server (env STEAD_URL).")
]
ApiKeyOption = Annotated[
    str, typer.Option("--api-key", envvar="STEAD_API_KEY", help="API key (env STEAD_API_KEY).")
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
def worker(
    environment: Annotated[
        str, typer.Option("--environment", help="The self_hosted environment to serve.")
    ],
    url: Url = "http://127.0.0.1:8787",
    environment_key: Annotated[
        str,
        typer.Option(
            "--environment-key",
            envvar="STEAD_ENVIRONMENT_KEY",
            help="The environment's key; made with --api-key when not given.",
        ),
    ] = "",
    api_key: ApiKeyOption = "",
    workdir: Annotated[
        Path, typer.Option("--workdir", help="Where the tools run (default: here).")
    ] = Path(),
    worker_id: Annotated[str | None, typer.Option("--worker-id")] = None,
    max_idle: Annotated[
        float, typer.Option("--max-idle", help="Seconds to stay on an idle session.")
    ] = 60.0,
) -> None:
    """Serve a self-hosted environment's work on this machine: its sessions' tools run here."""
    from stead.client.worker import WorkerSetupError, make_environment_key, run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    async def serve() -> None:
        key = environment_key
        if not key:
            if not api_key:
                raise WorkerSetupError("give --environment-key, or --api-key to make one")
            key = await make_environment_key(url, api_key, environment)
        await run_worker(
            url, environment, key, workdir.resolve(), worker_id=worker_id, max_idle=max_idle
        )

    try:
        anyio.run(serve)
    except WorkerSetupError as exc:
        _console().print(f"stead: {exc}", style="red")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


@app.command()
def demo() -> None:
    """Run one short agent session offline with a scripted model and print its events."""
    from stead.demo import run_demo

    run_demo(_console())


def main() -> None:
    app()
