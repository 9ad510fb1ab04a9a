"""Request validation derived from the official SDK's ``*Params`` TypedDicts.

The SDK's TypedDicts are the wire format; stead does not copy them. Their
pydantic core schema is tightened before use:

* unknown keys are rejected (``extra_behavior='forbid'``), so a misspelt field
  is a 400 instead of silently ignored;
* ``Iterable[...]`` fields validate eagerly as lists;
* unions of TypedDicts told apart by a literal ``type`` (or ``name``) become
  tagged unions, so an error names the branch the client meant;
* ``Literal[...] | str`` collapses to ``str`` (known model names stay open).

``validate`` turns the first, most specific error into ``RequestError`` with a
dotted path such as ``tools.0.input_schema: Field required``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import SchemaValidator

Schema = dict[str, Any]
DISCRIMINATORS = ("type", "name")
HEADER_PARAMS = ("betas", "workspace_id")
"""Fields of the SDK's params TypedDicts that travel as headers, never in a body."""


class RequestError(Exception):
    """The caller sent something the API does not accept (HTTP 400)."""

    def __init__(self, message: str, *, code: str | None = None) -> None:
        self.code = code
        super().__init__(message)


class StrictParams:
    """A validator and a JSON schema for one SDK params type. ``path_params`` are
    fields the SDK sends in the URL (``vault_id`` of a credential update), not
    in the body."""

    def __init__(self, params_type: Any, *, path_params: tuple[str, ...] = ()) -> None:
        schema: Schema = copy.deepcopy(dict(TypeAdapter(params_type).core_schema))
        self._defs = _definitions(schema)
        top = _resolve(schema, self._defs)
        for name in (*HEADER_PARAMS, *path_params):
            top.get("fields", {}).pop(name, None)
        _tighten(schema, self._defs)
        self.core_schema: Schema = schema
        self._validator = SchemaValidator(schema)

    def validate(self, data: Any, *, prefix: str = "") -> dict[str, Any]:
        try:
            result = self._validator.validate_python(data)
        except ValidationError as exc:
            raise RequestError(self._describe(exc, prefix)) from None
        if not isinstance(result, dict):
            raise RequestError(f"{prefix or 'body'}: expected an object")
        return result

    def json_schema(self, ref_template: str) -> dict[str, Any]:
        generator = GenerateJsonSchema(ref_template=ref_template)
        return generator.generate(self.core_schema, mode="validation")

    def _describe(self, exc: ValidationError, prefix: str) -> str:
        errors = exc.errors(include_url=False)
        best = max(errors, key=lambda e: len(e["loc"]))
        path = _readable_path(self.core_schema, self._defs, best["loc"])
        where = ".".join(p for p in (prefix, path) if p) or "body"
        return f"{where}: {best['msg']}"


def _definitions(schema: Schema) -> dict[str, Schema]:
    if schema.get("type") != "definitions":
        return {}
    return {d["ref"]: d for d in schema["definitions"]}


def _resolve(schema: Schema, defs: Mapping[str, Schema]) -> Schema:
    while True:
        kind = schema.get("type")
        if kind == "definition-ref":
            schema = defs[schema["schema_ref"]]
        elif kind in ("nullable", "default") or kind == "definitions":
            schema = schema["schema"]
        else:
            return schema


def _tighten(node: Any, defs: Mapping[str, Schema]) -> None:
    if isinstance(node, list):
        for item in node:
            _tighten(item, defs)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind == "typed-dict" and "extras_schema" not in node:
        node["extra_behavior"] = "forbid"
    elif kind == "generator":
        node["type"] = "list"
    elif kind == "union":
        _collapse_union(node, defs)
    for value in list(node.values()):
        _tighten(value, defs)


def _choice(choice: Any) -> Schema:
    picked: Schema = choice[0] if isinstance(choice, tuple | list) else choice
    return picked


def _collapse_union(node: Schema, defs: Mapping[str, Schema]) -> None:
    choices = [_choice(c) for c in node["choices"]]
    resolved = [_resolve(c, defs) for c in choices]
    kinds = {r.get("type") for r in resolved}
    if "str" in kinds and "literal" in kinds:
        kept = [
            c for c, r in zip(node["choices"], resolved, strict=True) if r.get("type") != "literal"
        ]
        if len(kept) == 1:
            node.clear()
            node.update(_choice(kept[0]))
            return
        node["choices"] = kept
    for field in DISCRIMINATORS:
        tags = [_literal_tag(r, field) for r in resolved]
        if all(t is not None for t in tags) and len(set(tags)) == len(tags):
            mapping = dict(zip(tags, choices, strict=True))
            node.clear()
            node.update({"type": "tagged-union", "choices": mapping, "discriminator": field})
            return


def _literal_tag(schema: Schema, field: str) -> str | None:
    if schema.get("type") != "typed-dict":
        return None
    spec = schema["fields"].get(field)
    if spec is None or not spec.get("required", False):
        return None
    inner = spec["schema"]
    if inner.get("type") == "literal" and len(inner["expected"]) == 1:
        return str(inner["expected"][0])
    return None


def _readable_path(root: Schema, defs: Mapping[str, Schema], loc: tuple[Any, ...]) -> str:
    """Walks the schema along ``loc`` and drops the union-branch labels pydantic adds."""
    parts: list[str] = []
    node: Schema | None = root
    for element in loc:
        node = None if node is None else _resolve(node, defs)
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
            return _choice(choice)
        schema = _resolve(_choice(choice), defs)
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
