"""Request validation derived from the official SDK's ``*Params`` TypedDicts.

The SDK's TypedDicts are the wire format; stead does not copy them. Their
pydantic core schemas, tightened (unknown keys rejected, tagged unions, see
``generate.py``), are generated from the installed SDK into ``params/*.json``
and loaded from there, so a server validates requests without importing the SDK.

``validate`` turns the first, most specific error into ``RequestError`` with a
dotted path such as ``tools.0.input_schema: Field required``.
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails, SchemaValidator

Schema = dict[str, Any]
HEADER_PARAMS = ("betas", "workspace_id")
"""Fields of the SDK's params TypedDicts that travel as headers, never in a body."""
PARAMS_DIR = Path(__file__).with_name("params")
IMPORT = "$import"
"""How a generated schema names a Python object: ``{"$import": "module:name"}``."""


class RequestError(Exception):
    """The caller sent something the API does not accept (HTTP 400)."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        self.code = code
        super().__init__(message)


class StrictParams:
    """A validator for one SDK params type, by its file's name (``generate.PARAMS``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @functools.cached_property
    def core_schema(self) -> Schema:
        # Read on first use: a server that never sees this request pays nothing,
        # and the generator can run while the files are missing.
        text = (PARAMS_DIR / f"{self.name}.json").read_text()
        schema: Schema = json.loads(text, object_hook=_load)
        return schema

    @functools.cached_property
    def _defs(self) -> dict[str, Schema]:
        return definitions(self.core_schema)

    @functools.cached_property
    def _validator(self) -> SchemaValidator:
        return SchemaValidator(self.core_schema)

    def validate(self, data: Any, *, prefix: str = "") -> dict[str, Any]:
        try:
            result = self._validator.validate_python(data)
        except ValidationError as exc:
            raise RequestError(self._describe(exc, prefix)) from None
        if not isinstance(result, dict):
            raise RequestError(f"{prefix or 'body'}: expected an object")
        return result

    def _describe(self, exc: ValidationError, prefix: str) -> str:
        errors = exc.errors(include_url=False)
        # The deepest error names the field. Of equally deep ones, those of the
        # union branch the body's ``type`` chose say why it failed; the other
        # branches only fail on their own ``type``, or on the chosen one's fields.
        others = {e["loc"][:-1] for e in errors if _other_branch(e)}
        chosen = [e for e in errors if not any(e["loc"][: len(o)] == o for o in others)]
        depth = max(len(e["loc"]) for e in errors)
        best = next(
            (e for e in chosen if len(e["loc"]) == depth),
            next(e for e in errors if len(e["loc"]) == depth),
        )
        path = _readable_path(self.core_schema, self._defs, best["loc"])
        where = ".".join(p for p in (prefix, path) if p) or "body"
        return f"{where}: {best['msg']}"


def _other_branch(error: ErrorDetails) -> bool:
    """An error that says only that a union branch's ``type`` is another."""
    return error["type"] == "literal_error" and error["loc"][-1:] == ("type",)


def _load(node: dict[str, Any]) -> Any:
    """``json.loads`` hook: a generated schema as pydantic-core takes it (named
    objects imported, union labels as tuples)."""
    if IMPORT in node:
        module, _, name = node[IMPORT].partition(":")
        return getattr(importlib.import_module(module), name)
    if node.get("type") == "union":
        node["choices"] = [tuple(c) if isinstance(c, list) else c for c in node["choices"]]
    return node


def definitions(schema: Schema) -> dict[str, Schema]:
    """A core schema's shared definitions by ``ref``."""
    if schema.get("type") != "definitions":
        return {}
    return {d["ref"]: d for d in schema["definitions"]}


def resolve(schema: Schema, defs: Mapping[str, Schema]) -> Schema:
    """The schema that does the validating, through references and wrappers."""
    while True:
        kind = schema.get("type")
        if kind == "definition-ref":
            schema = defs[schema["schema_ref"]]
        elif kind in ("nullable", "default") or kind == "definitions":
            schema = schema["schema"]
        else:
            return schema


def branch(choice: Any) -> Schema:
    """The schema of a union choice, which may be a ``(schema, label)`` pair."""
    picked: Schema = choice[0] if isinstance(choice, tuple | list) else choice
    return picked


def _readable_path(root: Schema, defs: Mapping[str, Schema], loc: tuple[Any, ...]) -> str:
    """Walks the schema along ``loc`` and drops the union-branch labels pydantic adds."""
    parts: list[str] = []
    node: Schema | None = root
    for element in loc:
        node = None if node is None else resolve(node, defs)
        kind = None if node is None else node.get("type")
        if node is not None and kind == "tagged-union":
            node = node["choices"].get(element)
            continue
        if node is not None and kind == "union":
            node = _union_branch(node, defs, element)
            continue
        parts.append(str(element))
        node = _child(node, element)
    return ".".join(parts)


def _union_branch(node: Schema, defs: Mapping[str, Schema], label: Any) -> Schema | None:
    for choice in node["choices"]:
        if isinstance(choice, tuple | list) and choice[1] == label:
            return branch(choice)
        schema = resolve(branch(choice), defs)
        # A schema built from the SDK labels a TypedDict branch by its class;
        # the generated files carry that label in the choice itself.
        cls = schema.get("cls")
        if schema.get("type") == label or (cls is not None and cls.__name__ == label):
            return schema
    return None


def _child(node: Schema | None, element: Any) -> Schema | None:
    if node is None:
        return None
    kind = node.get("type")
    if kind == "typed-dict":
        spec = node["fields"].get(element)
        return None if spec is None else spec["schema"]
    if kind in ("list", "tuple", "set"):
        return node.get("items_schema")
    if kind == "dict":
        return node.get("values_schema")
    return None
