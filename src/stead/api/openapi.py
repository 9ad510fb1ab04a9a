"""The OpenAPI document: FastAPI's, plus the request-body schemas the routes
validate against (derived from the SDK params, see ``schemas/validation.py``)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from stead.schemas import StrictParams, agents, environments, events, sessions

REQUEST_BODIES: dict[str, StrictParams] = {
    "AgentCreateParams": agents.CREATE,
    "AgentUpdateParams": agents.UPDATE,
    "EnvironmentCreateParams": environments.CREATE,
    "EnvironmentUpdateParams": environments.UPDATE,
    "SessionCreateParams": sessions.CREATE,
    "SessionUpdateParams": sessions.UPDATE,
    "EventSendParams": events.SEND,
}
REF = "#/components/schemas/{model}"


def response(model: type[Any]) -> dict[int | str, dict[str, Any]]:
    """``responses`` for a route answering 200 with ``model`` (an SDK response type)."""
    return {200: {"model": model}}


def body(name: str, *, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` for a route whose JSON body is validated by ``REQUEST_BODIES[name]``."""
    assert name in REQUEST_BODIES
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=name)}}},
        }
    }


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for name, params in REQUEST_BODIES.items():
                schema = params.json_schema(REF)
                schemas.update(schema.pop("$defs", {}))
                schemas[name] = schema
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
