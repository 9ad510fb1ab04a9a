"""``stead webhooks``: webhook endpoints of the installation's workspaces, made,
listed, changed and deleted beside a running server, as ``/v1/stead/webhooks``
does for one workspace (the signing secret is shown once, at creation and at
rotation)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import anyio
import typer

from stead.cli_support import PLAIN, DataDir, chosen_workspace, existing, opened, sealing_box
from stead.config import Settings
from stead.jsonvalues import Json

if TYPE_CHECKING:
    from stead.runtime import WebhookEndpoints
    from stead.store import Store, WebhookDelivery, WebhookEndpoint

webhooks_app = typer.Typer(help="Webhook endpoints: each belongs to one workspace.", **PLAIN)
T = TypeVar("T")
EndpointId = Annotated[str, typer.Argument(help="The endpoint's id (see stead webhooks list).")]
EventTypes = Annotated[
    list[str] | None,
    typer.Option("--event-type", help="A webhook event type to deliver; repeatable."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _run(settings: Settings, work: Callable[[Store, WebhookEndpoints], Awaitable[T]]) -> T:
    """``work`` on the store, with the endpoints service; a refused request or an
    unknown id stops the command with one line."""

    # Loaded here, not at import: every other ``stead`` command starts without them.
    from stead.runtime import WebhookEndpoints, webhook_parts
    from stead.schemas import RequestError
    from stead.store import NotFound, StaleSecretKey

    async def main() -> T:
        async with opened(settings) as store:
            egress, _ = webhook_parts(settings)
            service = WebhookEndpoints(store, await sealing_box(settings, store), egress)
            return await work(store, service)

    try:
        return anyio.run(main)
    except RequestError as exc:
        typer.echo(f"stead: {exc}", err=True)
        raise typer.Exit(2) from None
    except NotFound as exc:
        typer.echo(f"stead: {exc} in {settings.data_dir}", err=True)
        raise typer.Exit(1) from None
    except StaleSecretKey as exc:  # the key was rotated while this command ran
        typer.echo(f"stead: {exc}", err=True)
        raise typer.Exit(2) from None


# The wire form and the checks are the admin route's, loaded when a command runs.
def _endpoint_json(endpoint: WebhookEndpoint) -> Json:
    from stead.api.webhooks import endpoint_json

    return endpoint_json(endpoint)


def _delivery_json(delivery: WebhookDelivery) -> Json:
    from stead.api.webhooks import delivery_json

    return delivery_json(delivery)


def _parse_create(body: Json) -> Json:
    from stead.schemas.webhooks import parse_create

    return parse_create(body)


def _parse_update(body: Json) -> Json:
    from stead.schemas.webhooks import parse_update

    return parse_update(body)


def _print(body: Json | list[Json], as_json: bool) -> None:
    if as_json:
        print(json.dumps(body))
        return
    for item in body if isinstance(body, list) else [body]:
        typer.echo("  ".join(f"{k}={v}" for k, v in item.items() if k != "type"))


@webhooks_app.command("create")
def webhooks_create(
    url: Annotated[str, typer.Option(help="Where deliveries are POSTed.")],
    event_type: EventTypes = None,
    description: Annotated[str | None, typer.Option(help="A note for people.")] = None,
    workspace: Annotated[
        str | None, typer.Option(help="Workspace id; default: the first workspace.")
    ] = None,
    as_json: AsJson = False,
    data_dir: DataDir = None,
) -> None:
    """Register an endpoint and print it with its signing secret (shown only once)."""
    settings = existing(data_dir)

    async def create(store: Store, service: WebhookEndpoints) -> Json:
        fields = _parse_create(
            {"url": url, "event_types": event_type or [], "description": description}
        )
        owner = await chosen_workspace(store, settings, workspace)
        endpoint, secret = await service.create(owner, fields)
        return {**_endpoint_json(endpoint), "workspace_id": owner, "secret": secret}

    _print(_run(settings, create), as_json)


@webhooks_app.command("list")
def webhooks_list(
    workspace: Annotated[str | None, typer.Option(help="Only this workspace id.")] = None,
    as_json: AsJson = False,
    data_dir: DataDir = None,
) -> None:
    """List the endpoints of every workspace (never their secrets)."""

    settings = existing(data_dir)

    async def listed(store: Store, _: WebhookEndpoints) -> list[Json]:
        # A mistyped id lists nothing, as a workspace without endpoints does: say so.
        if workspace is not None:
            await chosen_workspace(store, settings, workspace)
        found = await store.list_webhook_endpoints(workspace)
        return [{**_endpoint_json(e), "workspace_id": e.workspace_id} for e in found]

    _print(_run(settings, listed), as_json)


@webhooks_app.command("update")
def webhooks_update(
    endpoint_id: EndpointId,
    url: Annotated[str | None, typer.Option(help="A new URL.")] = None,
    event_type: EventTypes = None,
    description: Annotated[str | None, typer.Option(help="A new note.")] = None,
    enabled: Annotated[
        bool | None, typer.Option("--enable/--disable", help="Deliver, or hold deliveries.")
    ] = None,
    as_json: AsJson = False,
    data_dir: DataDir = None,
) -> None:
    """Change an endpoint's URL, event types, description or status."""
    given: Json = {"url": url, "event_types": event_type, "description": description}
    if enabled is not None:
        given["status"] = "enabled" if enabled else "disabled"
    body = {k: v for k, v in given.items() if v is not None}

    async def update(_: Store, service: WebhookEndpoints) -> Json:
        endpoint = await service.update(None, endpoint_id, _parse_update(body))
        return _endpoint_json(endpoint)

    _print(_run(existing(data_dir), update), as_json)


@webhooks_app.command("rotate-secret")
def webhooks_rotate_secret(
    endpoint_id: EndpointId, as_json: AsJson = False, data_dir: DataDir = None
) -> None:
    """Give an endpoint a new signing secret and print it (shown only once)."""

    async def rotate(_: Store, service: WebhookEndpoints) -> Json:
        endpoint, secret = await service.rotate_secret(None, endpoint_id)
        return {**_endpoint_json(endpoint), "secret": secret}

    _print(_run(existing(data_dir), rotate), as_json)


@webhooks_app.command("delete")
def webhooks_delete(endpoint_id: EndpointId, data_dir: DataDir = None) -> None:
    """Delete an endpoint with its pending deliveries and their record."""

    async def delete(store: Store, _: WebhookEndpoints) -> None:
        await store.delete_webhook_endpoint(None, endpoint_id)

    _run(existing(data_dir), delete)
    typer.echo(f"deleted {endpoint_id}")


@webhooks_app.command("deliveries")
def webhooks_deliveries(
    endpoint_id: EndpointId,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Newest first.")] = 20,
    as_json: AsJson = False,
    data_dir: DataDir = None,
) -> None:
    """Show an endpoint's newest deliveries with every attempt."""

    async def listed(store: Store, _: WebhookEndpoints) -> list[Json]:
        found = await store.list_webhook_deliveries(None, endpoint_id, limit)
        return [_delivery_json(d) for d in found]

    _print(_run(existing(data_dir), listed), as_json)
