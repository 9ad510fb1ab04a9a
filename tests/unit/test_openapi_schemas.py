"""The shipped schemas (``stead/api/openapi_schemas.json``) are the installed
SDK's, the document built from them is the one FastAPI builds from the SDK's
types, and building it never imports the SDK."""

from __future__ import annotations

import copy
import subprocess
import sys
from typing import Any

from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from fastapi.utils import create_model_field

from stead.api import create_app, openapi_generate
from stead.api.openapi_schemas import SCHEMAS_FILE, SDK_MODEL, shipped
from stead.config import Settings

REFRESH = "python -m stead.api.openapi_generate"


def test_the_shipped_schemas_are_the_installed_sdks() -> None:
    assert SCHEMAS_FILE.read_text() == openapi_generate.rendered(), (
        f"{SCHEMAS_FILE.name} differs from the installed anthropic SDK's types: "
        f"run `{REFRESH}` and review the diff"
    )


def _with_sdk_models(route: APIRoute) -> APIRoute:
    """``route`` answering its named SDK types as FastAPI response models."""
    bound = copy.copy(route)
    bound.responses, bound.response_fields = dict(route.responses), dict(route.response_fields)
    for code, answer in route.responses.items():
        if SDK_MODEL in answer:
            model = openapi_generate.sdk_model(answer[SDK_MODEL])
            rest = {k: v for k, v in answer.items() if k != SDK_MODEL}
            bound.responses[code] = rest | {"model": model}
            bound.response_fields[code] = create_model_field(
                name=f"Response_{code}_{route.unique_id}", type_=model, mode="serialization"
            )
    return bound


def test_the_document_answers_with_the_schemas_fastapi_makes_from_the_sdk() -> None:
    app = create_app(Settings())
    routes: list[Any] = [_with_sdk_models(r) if isinstance(r, APIRoute) else r for r in app.routes]
    reference = get_openapi(title=app.title, version=app.version, routes=routes)
    document = app.openapi()
    for path, operations in reference["paths"].items():
        for method, operation in operations.items():
            ours = document["paths"][path][method]["responses"]
            for status, answer in operation["responses"].items():
                if status != "422":
                    assert ours[status] == answer, (path, method, status)
    theirs = reference["components"]["schemas"]
    for name in ("HTTPValidationError", "ValidationError"):
        theirs.pop(name, None)
    ours_components = document["components"]["schemas"]
    assert {k: ours_components[k] for k in theirs} == theirs
    # Every component the responses refer to is there, and no SDK type beyond them.
    assert set(ours_components) & set(shipped()["components"]) == set(theirs)


def test_building_the_document_imports_no_sdk() -> None:
    program = (
        "import sys; from stead.api import create_app; from stead.config import Settings; "
        "document = create_app(Settings()).openapi(); "
        "print(len(document['paths']), any(m.startswith('anthropic') for m in sys.modules))"
    )
    found = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    paths, loaded = found.stdout.split()
    assert int(paths) > 50 and loaded == "False"
