"""The OpenAPI document's schemas that come from the SDK, shipped as JSON.

The request bodies the routes validate (``schemas/params/``, with the SDK's
titles and descriptions) and the SDK response types the routes name
(``response("beta.BetaEnvironment")``) have JSON schemas only the SDK can make:
importing it is some 3,300 modules and about 54 MB, which a server would carry
for good after the first ``/openapi.json`` or ``/docs``. So they are generated
from the installed SDK (``openapi_generate.py``, as FastAPI makes a response
model's) into ``openapi_schemas.json``, shipped in the package, and
``tests/unit/test_openapi_schemas.py`` regenerates them and fails on any drift.
Refresh them after upgrading ``anthropic`` with::

    python -m stead.api.openapi_generate
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from stead.jsonvalues import Json

SCHEMAS_FILE = Path(__file__).with_name("openapi_schemas.json")
SDK_MODEL = "x-stead-sdk-model"
"""Key of a route's 200 response that names its SDK type until the document is built."""
REF = "#/components/schemas/{model}"
COMPONENTS = REF.format(model="")


def shipped() -> Json:
    """``{"requests": {body: schema}, "responses": {type: schema}, "components":
    {name: schema}}``, read when a document is built (a server that never builds
    one never holds it)."""
    loaded: Json = json.loads(SCHEMAS_FILE.read_text())
    return loaded


def components_for(schemas: Iterable[Any], components: Json) -> Json:
    """The ones of ``components`` that ``schemas`` refer to, directly or through
    each other (a reference to a schema not among them is left to its owner)."""
    found: Json = {}
    pending = list(_refs(list(schemas)))
    while pending:
        name = pending.pop()
        if name not in found and name in components:
            found[name] = components[name]
            pending.extend(_refs(components[name]))
    return found


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(COMPONENTS):
            yield ref[len(COMPONENTS) :]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)
