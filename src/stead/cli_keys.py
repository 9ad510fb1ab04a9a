"""``stead keys``: API keys of the installation's workspaces, made, listed and
revoked beside a running server (the secret is shown once, at creation)."""

from __future__ import annotations

import json
import unicodedata
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from stead.cli_support import PLAIN, DataDir, chosen_workspace, console, existing, opened
from stead.config import Settings

if TYPE_CHECKING:
    from stead.store import ApiKey

keys_app = typer.Typer(help="API keys: each belongs to one workspace.", **PLAIN)


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Option(help="A label for the key.")] = "key",
    workspace: Annotated[
        str | None, typer.Option(help="Workspace id; default: the first workspace.")
    ] = None,
    new_workspace: Annotated[
        str | None, typer.Option(help="Create a new workspace with this name for the key.")
    ] = None,
    admin: Annotated[
        bool, typer.Option("--admin", help="An operator's key: it may also set limits.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    data_dir: DataDir = None,
) -> None:
    """Create an API key and print it (it is shown only once)."""
    from stead.store import NotFound

    if workspace is not None and new_workspace is not None:
        # Either would be a guess: the key must not land where it was not meant to.
        typer.echo("stead: --workspace and --new-workspace: give one of them", err=True)
        raise typer.Exit(2)
    for option, given in (("--name", name), ("--new-workspace", new_workspace)):
        if given is not None and any(unicodedata.category(c) == "Cc" for c in given):
            # As a memory store's name: stead keys list prints names as they are.
            typer.echo(f"stead: {option}: must not contain control characters", err=True)
            raise typer.Exit(2)
    settings = existing(data_dir)
    try:
        key, secret = anyio.run(_create_key, settings, name, workspace, new_workspace, admin)
    except NotFound as exc:
        typer.echo(f"stead: --workspace: {exc} in {settings.data_dir}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        shown = {"id": key.id, "workspace_id": key.workspace_id, "key": secret, "admin": admin}
        print(json.dumps(shown))
    else:
        role = "admin key" if admin else "key"
        console().print(
            f"{secret}\n  workspace {key.workspace_id}, {role} {key.id} (shown once), "
            f"in {settings.data_dir}"
        )


async def _create_key(
    settings: Settings, name: str, workspace: str | None, new_workspace: str | None, admin: bool
) -> tuple[ApiKey, str]:
    async with opened(settings) as store:
        if new_workspace is None and workspace is None and not await store.list_workspaces():
            new_workspace = "default"
        if new_workspace is not None:
            # One transaction: a key that cannot be made leaves no empty workspace.
            return await store.new_workspace_key(new_workspace, name, admin=admin)
        workspace = await chosen_workspace(store, settings, workspace)
        return await store.create_api_key(workspace, name, admin=admin)


@keys_app.command("list")
def keys_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    data_dir: DataDir = None,
) -> None:
    """List the API keys of every workspace (never their secrets)."""
    settings = existing(data_dir)
    keys = anyio.run(_list_keys, settings)
    rows = [
        {
            "id": k.id,
            "workspace_id": k.workspace_id,
            "name": k.name,
            "ends_with": k.hint,
            "created_at": k.created_at.isoformat(),
            "revoked_at": None if k.revoked_at is None else k.revoked_at.isoformat(),
            "admin": k.admin,
        }
        for k in keys
    ]
    if as_json:
        print(json.dumps(rows))
        return
    header: tuple[str, ...] = (
        "id",
        "workspace",
        "name",
        "ends with",
        "created",
        "revoked",
        "admin",
    )
    lines: list[tuple[str, ...]] = [header] + [
        (
            k.id,
            k.workspace_id,
            _escaped(k.name),
            f"…{k.hint}",
            k.created_at.isoformat()[:19],
            k.revoked_at.isoformat()[:19] if k.revoked_at else "",
            "admin" if k.admin else "",
        )
        for k in keys
    ]
    # Plain columns, never cut: an id is what `stead keys revoke` takes.
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


def _escaped(name: str) -> str:
    """A name made before control characters were refused, as one safe cell."""
    return "".join(repr(c)[1:-1] if unicodedata.category(c) == "Cc" else c for c in name)


async def _list_keys(settings: Settings) -> list[ApiKey]:
    async with opened(settings) as store:
        return await store.list_api_keys()


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id (see stead keys list).")],
    data_dir: DataDir = None,
) -> None:
    """Revoke an API key. Running servers refuse it within STEAD_AUTH_CACHE_SECONDS."""
    from stead.store import NotFound

    settings = existing(data_dir)
    try:
        key = anyio.run(_revoke_key, settings, key_id)
    except NotFound:
        typer.echo(f"stead: no API key {key_id} in {settings.data_dir}", err=True)
        raise typer.Exit(1) from None
    assert key.revoked_at is not None
    typer.echo(f"revoked {key.id} (workspace {key.workspace_id}) at {key.revoked_at.isoformat()}")


async def _revoke_key(settings: Settings, key_id: str) -> ApiKey:
    async with opened(settings) as store:
        return await store.revoke_api_key(key_id)
