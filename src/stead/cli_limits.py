"""``stead limits``: an operator's limits per workspace and environment, shown and
set straight in the store beside a running server (as the admin routes do)."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

import anyio
import typer

from stead.cli_support import PLAIN, DataDir, chosen_workspace, console, existing, opened
from stead.config import Settings
from stead.schemas import RequestError
from stead.schemas.workspace_limits import ENVIRONMENT_FIELDS, WORKSPACE_FIELDS, changes, wire

limits_app = typer.Typer(
    help="Limits per workspace (monthly tokens, spend, sandbox time, concurrent "
    "sandboxes) and per environment (sandbox time per session).",
    **PLAIN,
)

Workspace = Annotated[str | None, typer.Option(help="Workspace id; default: the first workspace.")]
Limit = Annotated[str | None, typer.Option(help="A whole number, or 'none' to clear it.")]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _value(field: str, text: str) -> Any:
    if text.lower() == "none":
        return None
    if field == "monthly_list_cost":
        cents = float(text) * 100 if _number(text) else -1.0
        if not math.isfinite(cents) or cents < 0 or abs(cents - round(cents)) > 1e-6:
            # 0.001 would be stored as 0; 1e308 dollars are no number of cents
            typer.echo(
                "stead: --monthly-spend: US dollars to the cent (e.g. 50 or 12.5), or 'none'",
                err=True,
            )
            raise typer.Exit(2)
        return {"amount": str(round(cents)), "currency": "USD"}
    return int(text) if text.isascii() and text.isdigit() else text


def _number(text: str) -> bool:
    try:
        return math.isfinite(value := float(text)) and value >= 0
    except ValueError:
        return False


async def _apply(
    settings: Settings, workspace: str | None, scope: str | None, body: dict[str, Any]
) -> tuple[str, dict[str, int], dict[str, int]]:
    """(workspace id, the workspace's limits, the environment's, if ``scope``)."""
    from stead.store import WORKSPACE

    async with opened(settings) as store:
        workspace = await chosen_workspace(store, settings, workspace)
        fields = WORKSPACE_FIELDS if scope is None else ENVIRONMENT_FIELDS
        wanted = changes(body, fields)
        target = WORKSPACE if scope is None else scope
        if wanted:
            await store.set_limits(workspace, target, wanted)
        own = await store.limits(workspace)
        per_environment = await store.limits(workspace, scope) if scope is not None else {}
        return workspace, own, per_environment


def _run(settings: Settings, workspace: str | None, scope: str | None, body: dict[str, Any]) -> Any:
    from stead.store import NotFound

    try:
        return anyio.run(_apply, settings, workspace, scope, body)
    except RequestError as exc:
        typer.echo(f"stead: {exc}", err=True)
        raise typer.Exit(2) from None
    except NotFound as exc:  # the environment: the workspace is checked first
        typer.echo(f"stead: {exc} in {settings.data_dir}", err=True)
        raise typer.Exit(1) from None


def _show(title: str, limits: dict[str, Any], as_json: bool, ids: dict[str, str]) -> None:
    if as_json:
        print(json.dumps({**ids, "limits": limits}))
        return
    console().print(title)
    for field, value in limits.items():
        if isinstance(value, dict):
            value = f"${int(value['amount']) / 100:,.2f}"
        console().print(f"  {field:<24} {'none' if value is None else value}")


@limits_app.command("show")
def limits_show(
    workspace: Workspace = None, as_json: JsonFlag = False, data_dir: DataDir = None
) -> None:
    """Show a workspace's limits."""
    found, own, _ = _run(existing(data_dir), workspace, None, {})
    shown = wire(own, WORKSPACE_FIELDS)
    _show(f"workspace {found}", shown, as_json, {"workspace_id": found})


@limits_app.command("set")
def limits_set(
    workspace: Workspace = None,
    monthly_tokens: Limit = None,
    monthly_spend: Annotated[
        str | None, typer.Option(help="US dollars of list cost per month, or 'none'.")
    ] = None,
    monthly_sandbox_seconds: Limit = None,
    concurrent_sandboxes: Limit = None,
    file_storage_bytes: Limit = None,
    as_json: JsonFlag = False,
    data_dir: DataDir = None,
) -> None:
    """Set (or clear, with 'none') a workspace's limits; the others stay as they are."""
    given = {
        "monthly_tokens": monthly_tokens,
        "monthly_list_cost": monthly_spend,
        "monthly_sandbox_seconds": monthly_sandbox_seconds,
        "concurrent_sandboxes": concurrent_sandboxes,
        "file_storage_bytes": file_storage_bytes,
    }
    body = {k: _value(k, v) for k, v in given.items() if v is not None}
    found, own, _ = _run(existing(data_dir), workspace, None, body)
    shown = wire(own, WORKSPACE_FIELDS)
    _show(f"workspace {found}", shown, as_json, {"workspace_id": found})


@limits_app.command("set-environment")
def limits_set_environment(
    environment: Annotated[str, typer.Argument(help="Environment id.")],
    workspace: Workspace = None,
    session_sandbox_seconds: Limit = None,
    as_json: JsonFlag = False,
    data_dir: DataDir = None,
) -> None:
    """Set (or clear, with 'none') an environment's limits; show them."""
    given = {"session_sandbox_seconds": session_sandbox_seconds}
    body = {k: _value(k, v) for k, v in given.items() if v is not None}
    found, _, per_environment = _run(existing(data_dir), workspace, environment, body)
    shown = wire(per_environment, ENVIRONMENT_FIELDS)
    ids = {"workspace_id": found, "environment_id": environment}
    _show(f"environment {environment} (workspace {found})", shown, as_json, ids)
