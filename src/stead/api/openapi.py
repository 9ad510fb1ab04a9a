"""The OpenAPI document: FastAPI's, plus what FastAPI cannot know about stead.

* The request-body schemas the routes validate against (derived from the SDK
  params, see ``schemas/validation.py``).
* The statuses each route really answers, all with the error envelope: 400 (a
  body, query or path value refused; never FastAPI's 422), 401 and 403 (the API
  key), 404 where a path names a resource, 413 and 415 where it reads a body,
  and what the route declares besides (``response(Model, 404, 409)``: a body
  that names another resource, a state conflict).
* The API-key security schemes (``x-api-key`` or ``Authorization: Bearer``).
* The terminal WebSockets, as ``x-websocket`` path items (``WEBSOCKET``).

Routes name their SDK response types by path (``response("beta.BetaEnvironment")``)
and, like the request bodies, they take their schemas from ``openapi_schemas.json``,
generated from the SDK (``openapi_schemas.py``): a server never imports the SDK
for its document.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute, APIWebSocketRoute

from stead.api.openapi_schemas import REF, SDK_MODEL, components_for, shipped
from stead.schemas import (
    StrictParams,
    agents,
    environments,
    events,
    memories,
    resources,
    sessions,
    vaults,
    webhooks,
    work,
)

REQUEST_BODIES: dict[str, StrictParams] = {
    "AgentCreateParams": agents.CREATE,
    "AgentUpdateParams": agents.UPDATE,
    "EnvironmentCreateParams": environments.CREATE,
    "EnvironmentUpdateParams": environments.UPDATE,
    "SessionCreateParams": sessions.CREATE,
    "SessionUpdateParams": sessions.UPDATE,
    "EventSendParams": events.SEND,
    "VaultCreateParams": vaults.VAULT_CREATE,
    "VaultUpdateParams": vaults.VAULT_UPDATE,
    "CredentialCreateParams": vaults.CREDENTIAL_CREATE,
    "CredentialUpdateParams": vaults.CREDENTIAL_UPDATE,
    "WorkUpdateParams": work.UPDATE,
    "WorkStopParams": work.STOP,
    "ResourceAddParams": resources.ADD,
    "ResourceUpdateParams": resources.UPDATE,
    "WebhookCreateParams": webhooks.CREATE,
    "WebhookUpdateParams": webhooks.UPDATE,
    "MemoryStoreCreateParams": memories.MEMORY_STORE_CREATE,
    "MemoryStoreUpdateParams": memories.MEMORY_STORE_UPDATE,
    "MemoryCreateParams": memories.MEMORY_CREATE,
    "MemoryUpdateParams": memories.MEMORY_UPDATE,
}
ERROR = "Error"
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "error", "request_id"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"type": "string"},
                "message": {"type": "string"},
                "details": {"type": "object"},
            },
        },
        "request_id": {"type": "string"},
    },
}
STATUS_TEXT = {
    400: "The request is malformed: the message names the field",
    401: "No API key, or not a valid one",
    403: "The API key belongs to another workspace than anthropic-workspace-id",
    404: "No such resource in this workspace",
    409: "The resource's state forbids this change",
    413: "The body is larger than the server accepts",
    415: "The body is not application/json in UTF-8",
    503: "The database or the sandbox host cannot serve this now; try again",
}
SECURITY_SCHEMES = {
    "ApiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
    "Bearer": {"type": "http", "scheme": "bearer"},
}


def response(model: str, *statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses`` for a route answering 200 with ``model`` (an SDK response type, by
    its path under ``anthropic.types``: ``"beta.BetaEnvironment"``), and the error
    ``statuses`` it can answer beyond those every route of its shape can."""
    return {200: {SDK_MODEL: model}, **errors(*statuses)}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses`` naming error ``statuses`` a route can answer (see ``response``)."""
    return {status: _error(status) for status in statuses}


def body(name: str, *, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` for a route whose JSON body is validated by ``REQUEST_BODIES[name]``."""
    assert name in REQUEST_BODIES
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": {"$ref": REF.format(model=name)}}},
        }
    }


def _error(status: int) -> dict[str, Any]:
    return {
        "description": STATUS_TEXT[status],
        "content": {"application/json": {"schema": {"$ref": REF.format(model=ERROR)}}},
    }


def _statuses(path: str, operation: dict[str, Any]) -> list[int]:
    if operation.get("security") == []:
        return []  # the health checks: no key, no parameters, no body
    found = [400, 401, 403, 503]  # 503: the database is away or busy (retryable)
    if "{" in path:
        found.append(404)
    if "requestBody" in operation:
        found += [413, 415]
    return found


WEBSOCKET = "x-websocket"
"""Path-item extension describing a WebSocket route: OpenAPI has no WebSocket
operations, and an HTTP operation there would invite clients (and the fuzzer)
to send plain GETs that the route never answers."""
TERMINAL_PARAMETERS = [
    {"name": "id", "in": "query", "description": "Attach to this terminal (made when new)"},
    {"name": "offset", "in": "query", "description": "Replay output from this byte offset"},
    {"name": "rows", "in": "query", "description": "Terminal height (default 24)"},
    {"name": "cols", "in": "query", "description": "Terminal width (default 80)"},
]
TERMINALS = {
    "exec": "Runs one command in the session's sandbox and relays its output. The "
    'command comes in ``?command=`` or in a first text frame ``{"type": "start", '
    '"command": "..."}`` (preferred: a URL may be logged by proxies).',
    "pty": "An interactive shell on a pseudo-terminal in the session's sandbox.",
}
TERMINAL_PROTOCOL = (
    "WebSocket (DESIGN.md §5). Authenticate with ``x-api-key`` or "
    "``Authorization: Bearer`` on the upgrade request. Binary frames: first byte "
    "0x00 stdin, 0x01 stdout, 0x02 stderr, 0x03 + int32 exit code (then close 1000), "
    "0x04 end of the scrollback replay. Text frames are JSON control messages "
    "(``resize``, ``ping``; the server sends ``attached``, ``offset``, ``replayed``). "
    "Close codes: 4400 bad request, 4401 no valid key, 4404 no such session, "
    "4408 too slow, 4503 no sandbox, 1013 try again."
)


def _websockets(app: FastAPI) -> dict[str, dict[str, Any]]:
    """Path items describing the app's WebSocket routes (``WEBSOCKET``)."""
    found: dict[str, dict[str, Any]] = {}
    for route in app.routes:
        if not isinstance(route, APIWebSocketRoute):
            continue
        path = route.path
        kind = path.rsplit("/", 1)[-1]
        if kind not in TERMINALS:
            continue
        parameters = [{"name": "session_id", "in": "path", "required": True}]
        if kind == "exec":
            parameters.append({"name": "command", "in": "query", "description": "The command"})
        found[path] = {
            WEBSOCKET: {
                "summary": f"Terminal ({kind}) over WebSocket",
                "description": f"{TERMINALS[kind]}\n\n{TERMINAL_PROTOCOL}",
                "parameters": parameters + TERMINAL_PARAMETERS,
                "security": [{name: []} for name in SECURITY_SCHEMES],
            }
        }
    return found


def _document(app: FastAPI) -> dict[str, Any]:
    # Copies: FastAPI's document shares dicts with the (module-level) routes, and a
    # reader that changes its document (a fuzzer injecting links) must not change
    # the next app's.
    sdk = shipped()
    routes = [
        _with_schemas(route, sdk["responses"]) if isinstance(route, APIRoute) else route
        for route in app.routes
    ]
    document = copy.deepcopy(
        get_openapi(
            title=app.title, version=app.version, description=app.description, routes=routes
        )
    )
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.update(components_for([document["paths"]], sdk["components"]))
    for name in REQUEST_BODIES:
        schema = sdk["requests"][name]
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    schemas[ERROR] = copy.deepcopy(ERROR_SCHEMA)
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    components["securitySchemes"] = copy.deepcopy(SECURITY_SCHEMES)
    document["security"] = [{name: []} for name in SECURITY_SCHEMES]
    for path, operations in document.get("paths", {}).items():
        for operation in operations.values():
            answers = operation.setdefault("responses", {})
            answers.pop("422", None)
            for status in _statuses(path, operation):
                answers.setdefault(str(status), _error(status))
    document.setdefault("paths", {}).update(_websockets(app))
    return document


def _with_schemas(route: APIRoute, schemas: dict[str, Any]) -> APIRoute:
    """A copy of ``route`` whose named SDK response types carry their shipped
    schemas (the route is shared by every app, so it is not changed)."""
    named = {code: answer for code, answer in route.responses.items() if SDK_MODEL in answer}
    if not named:
        return route
    bound = copy.copy(route)
    bound.responses = dict(route.responses)
    for code, answer in named.items():
        schema = dict(schemas[answer[SDK_MODEL]])
        if "$ref" not in schema:
            # Titled as FastAPI titles an inline response model: after its field.
            schema["title"] = f"Response_{code}_{route.unique_id}".title().replace("_", " ")
        content = {"application/json": {"schema": schema}}
        bound.responses[code] = {k: v for k, v in answer.items() if k != SDK_MODEL} | {
            "content": content
        }
    return bound


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
