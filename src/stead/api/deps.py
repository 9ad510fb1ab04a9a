"""Request-scoped dependencies: the app's services and the authenticated caller."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from stead.api.errors import ApiError
from stead.config import Settings
from stead.runtime import EventBus
from stead.store import Store


@dataclass(frozen=True)
class Services:
    """What the lifespan opened; routes reach it through ``services(request)``."""

    settings: Settings
    store: Store
    bus: EventBus


@dataclass(frozen=True)
class Caller:
    workspace_id: str
    key_id: str


def services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


def _presented_key(request: Request) -> str | None:
    header = request.headers.get("x-api-key")
    if header:
        return header.strip()
    authorization = request.headers.get("authorization", "")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


async def caller(request: Request) -> Caller:
    secret = _presented_key(request)
    if secret is None:
        raise ApiError(401, "send an API key as 'x-api-key' or 'Authorization: Bearer <key>'")
    key = await services(request).store.authenticate(secret)
    if key is None:
        raise ApiError(401, "invalid API key")
    workspace = request.headers.get("anthropic-workspace-id")
    if workspace and workspace != key.workspace_id:
        raise ApiError(403, "anthropic-workspace-id: this API key belongs to another workspace")
    return Caller(workspace_id=key.workspace_id, key_id=key.id)
