"""``stead sandbox-host``: run the sandbox host, or ask after or stop the one
``stead serve`` uses."""

from __future__ import annotations

import logging
import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from stead.cli_support import (
    DataDir,
    freeze_start,
    read_settings,
    start_uncollected,
    stop_on_signal,
    validated,
)

if TYPE_CHECKING:
    from stead.sandbox import HostAddress

sandbox_host_app = typer.Typer(
    help=(
        "Run the sandbox host (with no command), or ask after or stop the one "
        "`stead serve` uses. It owns every sandbox on this machine and outlives "
        "`stead serve`: stopping the server leaves it running."
    ),
    invoke_without_command=True,
    rich_markup_mode=None,
)


@sandbox_host_app.callback()
def sandbox_host(ctx: typer.Context, data_dir: DataDir = None) -> None:
    """Run the sandbox host (without a command): it owns every sandbox on this
    machine and outlives `stead serve`.

    `stead serve` starts one by itself when none answers; run it yourself to
    keep it under a service manager or to serve a remote brain
    (STEAD_SANDBOX_HOST_LISTEN_TCP with STEAD_SANDBOX_HOST_TOKEN).
    """
    if ctx.invoked_subcommand is not None:
        return
    start_uncollected()
    from stead.sandbox.providers.host import EXIT_ALREADY_RUNNING
    from stead.sandbox_host.server import HostAlreadyRunning, HostCannotStart, serve_host
    from stead.sandbox_host.settings import HostSettings

    settings = validated(HostSettings, data_dir=data_dir)
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
            tasks.start_soon(stop_on_signal, tasks.cancel_scope)
            await serve_host(options)

    freeze_start()
    # The task groups (this one's, the host's) raise what stops the start in a group.
    try:
        anyio.run(run, backend_options={"use_uvloop": True})
    except* HostCannotStart as group:  # a setting: as a bad one is, in one line
        typer.echo(f"stead: {_first(group)}", err=True)
        raise typer.Exit(2) from None
    except* HostAlreadyRunning as group:
        typer.echo(f"stead: {_first(group)}", err=True)
        raise typer.Exit(EXIT_ALREADY_RUNNING) from None


def _first(group: BaseExceptionGroup[Exception]) -> Exception:
    """The first exception in ``group``, however deep the groups nest it."""
    found = group.exceptions[0]
    return _first(found) if isinstance(found, BaseExceptionGroup) else found


def _host_address(data_dir: Path | None) -> HostAddress:
    from stead.sandbox import host_address

    return host_address(read_settings(data_dir=data_dir))


@sandbox_host_app.command("status")
def sandbox_host_status(data_dir: DataDir = None) -> None:
    """Whether the sandbox host `stead serve` uses answers, and what it holds. Exits 1 if none."""
    from stead.sandbox.admin import host_status

    found = anyio.run(host_status, _host_address(data_dir))
    if found.other_version:
        pid = f" (pid {found.pid})" if found.pid is not None else ""
        typer.echo(f"a sandbox host of another stead version{pid} at {found.address}")
        typer.echo(f"{found.problem}; stead sandbox-host stop stops it")
        raise typer.Exit(1)
    if found.answer is None:
        typer.echo(f"no sandbox host answers at {found.address} ({found.problem})")
        raise typer.Exit(1)
    answer = found.answer
    held = ", ".join(f"{n} {state}" for state, n in sorted(answer["sandboxes"].items()))
    typer.echo(f"sandbox host {answer['host_id']} (pid {answer['pid']}) at {found.address}")
    typer.echo(f"other processes reach it at: {answer.get('address') or 'nowhere (no address)'}")
    typer.echo(f"sandboxes: {held or 'none'}")
    if answer.get("isolation_problem"):
        typer.echo(f"cannot isolate: {answer['isolation_problem']}")


@sandbox_host_app.command("stop")
def sandbox_host_stop(
    # A wait of none (0, -1: "still answers after -1 s") or NaN (taken for a remote
    # host's refusal) reported a failure after the host was told to stop.
    wait: Annotated[float, typer.Option(min=0.001, help="Seconds to wait for it to stop.")] = 30.0,
    data_dir: DataDir = None,
) -> None:
    """Stop the sandbox host (of this stead's version or, left running across an
    upgrade, another): its sandboxes' processes and terminals end; their
    workspaces stay in its work directory, and the next host saves or restores
    them (the next `stead serve` starts one)."""
    from stead.sandbox.admin import stop_host

    address = _host_address(data_dir)
    try:
        found = anyio.run(partial(stop_host, address, wait_seconds=wait))
    except ValueError as exc:
        typer.echo(f"stead: {exc}", err=True)
        raise typer.Exit(1) from None
    except TimeoutError:
        typer.echo(f"stead: the sandbox host at {address} still answers after {wait:g} s", err=True)
        raise typer.Exit(1) from None
    if found.other_version and found.pid is None:
        typer.echo(f"stead: {found.problem}; its pid cannot be read at {address}", err=True)
        raise typer.Exit(1)
    if found.pid is None:
        typer.echo(f"no sandbox host answers at {address}; nothing to stop")
        return
    which = (
        "the sandbox host of another stead version" if found.other_version else "the sandbox host"
    )
    typer.echo(f"stopped {which} (pid {found.pid}) at {address}")
