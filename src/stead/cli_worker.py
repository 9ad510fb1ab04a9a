"""``stead worker``: serve a self-hosted environment's work on this machine,
its sessions' built-in tools run here: as this user in ``--workdir``, or with
``--sandbox`` in stead sandboxes (bubblewrap) from a local sandbox host."""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from stead.cli_support import ApiKeyOption, DataDir, Url, console, validated
from stead.config import Settings

CREDENTIAL_VARIABLES = ("STEAD_ENVIRONMENT_KEY", "STEAD_API_KEY")
"""The worker's own credentials, when given in its environment: never passed on
to the commands it runs (the SDK's bash tool inherits the process environment,
minus only ``ANTHROPIC_*``)."""

NETWORKING = {"type": "unrestricted"}
"""A worker's sandboxes reach what the worker's machine reaches (minus the
blocklist); the environment's own config has no networking for self-hosted."""


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
        Path | None, typer.Option("--workdir", help="Where the tools run (default: here).")
    ] = None,
    worker_id: Annotated[str | None, typer.Option("--worker-id")] = None,
    max_idle: Annotated[
        float,
        typer.Option("--max-idle", min=0.001, help="Seconds to stay on an idle session."),
    ] = 60.0,
    sandbox: Annotated[
        bool,
        typer.Option(
            "--sandbox",
            help="Run the tools in stead sandboxes (bubblewrap; needs root), one per "
            "session, from the sandbox host of --data-dir (started if none answers).",
        ),
    ] = False,
    data_dir: DataDir = None,
) -> None:
    """Serve a self-hosted environment's work on this machine: its sessions' tools run here."""
    import anthropic

    from stead.client.worker import WorkerSetupError, make_environment_key, run_worker

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in CREDENTIAL_VARIABLES:
        os.environ.pop(name, None)

    terminated = False

    async def serve() -> None:
        # SIGTERM ends the worker as Ctrl-C does: the call in flight finishes and
        # is answered, the item is stopped, the bash process ends. The default
        # action killed the worker alone: its command ran on, orphaned, and the
        # session waited out the lease to hear that the call "may have run".
        failed: Exception | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(on_sigterm, tg.cancel_scope)
            try:
                await work()
            except (WorkerSetupError, anthropic.APIStatusError) as exc:
                failed = exc  # raised bare, not in the task group's exception group
            tg.cancel_scope.cancel()
        if failed is not None:
            raise failed

    async def on_sigterm(scope: anyio.CancelScope) -> None:
        nonlocal terminated
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                terminated = True
                scope.cancel()
                return

    async def work() -> None:
        key = environment_key
        if not key:
            if not api_key:
                raise WorkerSetupError("give --environment-key, or --api-key to make one")
            key = await make_environment_key(url, api_key, environment)
        where = (workdir or Path()).resolve()
        if not sandbox:
            await run_worker(url, environment, key, where, worker_id=worker_id, max_idle=max_idle)
            return
        sandboxes = _session_sandboxes(validated(Settings, data_dir=data_dir, sandbox="bwrap"))
        try:
            await run_worker(
                url,
                environment,
                key,
                where,
                worker_id=worker_id,
                max_idle=max_idle,
                tools=_sandboxed_toolset(sandboxes),
            )
        finally:
            with anyio.CancelScope(shield=True):
                await sandboxes.aclose()

    try:
        anyio.run(serve)
        if terminated:
            raise typer.Exit(143)
    except WorkerSetupError as exc:
        console().print(f"stead: {exc}", style="red")
        raise typer.Exit(2) from None
    except anthropic.APIStatusError as exc:
        # A refusal the worker cannot outwait: a revoked or wrong key, another
        # environment's key, an environment that is gone.
        console().print(
            f"stead: the server refused the worker ({exc.status_code}): {_refusal(exc.body)}",
            style="red",
        )
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _refusal(body: object) -> str:
    """The API error's message, from its body."""
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else "no reason given"


def _session_sandboxes(settings: Settings) -> Any:
    from stead.runtime.sandboxconfig import sandbox_config
    from stead.sandbox import open_provider
    from stead.tools.worker_toolset import SessionSandboxes

    config = sandbox_config(settings, {"networking": NETWORKING})
    return SessionSandboxes(open_provider(settings), config)


def _sandboxed_toolset(sandboxes: Any) -> Any:
    from stead.tools.worker_toolset import sandboxed_toolset

    return sandboxed_toolset(sandboxes)
