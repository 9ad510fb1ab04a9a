"""Writes ``openapi_schemas.json`` from the installed SDK (see
``openapi_schemas.py``)::

    python -m stead.api.openapi_generate
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from typing import Any

from stead.api.openapi import REQUEST_BODIES
from stead.api.openapi_schemas import REF, SCHEMAS_FILE, SDK_MODEL
from stead.jsonvalues import Json

SDK_TYPES = "anthropic.types"
FASTAPI_OWN = ("HTTPValidationError", "ValidationError")
"""Schemas FastAPI adds to every document, and stead's leaves out (it answers 400s)."""


def sdk_model(name: str) -> Any:
    """The SDK's response type at ``name`` (a path under ``anthropic.types``)."""
    module, _, attribute = f"{SDK_TYPES}.{name}".rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def responses(names: Iterable[str]) -> tuple[Json, Json]:
    """(schema of each SDK type of ``names``, the components they refer to), as
    FastAPI makes them for a response model. An inline schema's title, which
    FastAPI takes from the route, is left to the document."""
    from fastapi import FastAPI

    ordered = sorted(set(names))
    app = FastAPI()
    for index, name in enumerate(ordered):
        app.add_api_route(f"/{index}", _answer, methods=["GET"], response_model=sdk_model(name))
    document = app.openapi()
    found: Json = {}
    for index, name in enumerate(ordered):
        answer = document["paths"][f"/{index}"]["get"]["responses"]["200"]
        schema = answer["content"]["application/json"]["schema"]
        found[name] = {k: v for k, v in schema.items() if k != "title" or "$ref" in schema}
    schemas = document.get("components", {}).get("schemas", {})
    return found, {k: v for k, v in sorted(schemas.items()) if k not in FASTAPI_OWN}


def _answer() -> None:
    """The body of every route of ``responses``' app (never called)."""


def named_in_routes() -> set[str]:
    """Every SDK type a route of stead's app names."""
    from fastapi.routing import APIRoute

    from stead.api import create_app
    from stead.config import Settings

    return {
        answer[SDK_MODEL]
        for route in create_app(Settings()).routes
        if isinstance(route, APIRoute)
        for answer in route.responses.values()
        if SDK_MODEL in answer
    }


def generated() -> Json:
    from stead.schemas import generate

    found, components = responses(named_in_routes())
    requests = {name: generate.json_schema(p.name, REF) for name, p in REQUEST_BODIES.items()}
    return {"requests": requests, "responses": found, "components": components}


def rendered() -> str:
    return json.dumps(generated(), indent=1) + "\n"


def main() -> None:
    SCHEMAS_FILE.write_text(rendered())
    print(f"wrote {SCHEMAS_FILE}")


if __name__ == "__main__":
    main()
