"""Writes the tightened core schemas of the SDK's ``*Params`` TypedDicts to ``params/``.

The SDK stays the source of truth for request shapes, but importing it costs a
server about a second and 38 MB at start. So the schemas ``StrictParams``
validates with are generated from the installed SDK into JSON files shipped in
the package, and a test regenerates them and fails on any drift. Refresh them
after upgrading ``anthropic`` with::

    python -m stead.schemas.generate

What JSON cannot hold is written so that loading gives pydantic-core the same
validator: a Python object becomes ``{"$import": "module:name"}``; a TypedDict's
``cls`` is dropped, its class name kept as the label of the union branch it is
(pydantic-core labels a branch by that name, and errors name the branch);
``serialization`` entries are dropped (the schemas only validate); the ids
pydantic appends to ``ref`` names are dropped so the output is stable.

Tightening:

* unknown keys are rejected (``extra_behavior='forbid'``), so a misspelt field
  is a 400 instead of silently ignored;
* ``Iterable[...]`` fields validate eagerly as lists;
* unions of TypedDicts told apart by a literal ``type`` (or ``name``) become
  tagged unions, so an error names the branch the client meant;
* ``Literal[...] | str`` collapses to ``str`` (known model names stay open);
* a literal's values are sorted, so an error lists them in a stable order;
* numbers, booleans and strings are strict: ``true`` is no ``1`` and ``"3"``
  no ``3``, as a JSON schema has it (pydantic's lax mode would coerce them).
"""

from __future__ import annotations

import copy
import importlib
import json
import re
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import GenerateJsonSchema

from stead.schemas.validation import (
    HEADER_PARAMS,
    IMPORT,
    PARAMS_DIR,
    Schema,
    branch,
    definitions,
    resolve,
)

PARAMS = {
    "agent_create": "anthropic.types.beta.agent_create_params:AgentCreateParams",
    "agent_update": "anthropic.types.beta.agent_update_params:AgentUpdateParams",
    "environment_create": "anthropic.types.beta.environment_create_params:EnvironmentCreateParams",
    "environment_update": "anthropic.types.beta.environment_update_params:EnvironmentUpdateParams",
    "session_create": "anthropic.types.beta.session_create_params:SessionCreateParams",
    "session_update": "anthropic.types.beta.session_update_params:SessionUpdateParams",
    "event_send": "anthropic.types.beta.sessions.event_send_params:EventSendParams",
    "vault_create": "anthropic.types.beta.vault_create_params:VaultCreateParams",
    "vault_update": "anthropic.types.beta.vault_update_params:VaultUpdateParams",
    "credential_create": (
        "anthropic.types.beta.vaults.credential_create_params:CredentialCreateParams"
    ),
    "credential_update": (
        "anthropic.types.beta.vaults.credential_update_params:CredentialUpdateParams"
    ),
    "work_update": "anthropic.types.beta.environments.work_update_params:WorkUpdateParams",
    "work_stop": "anthropic.types.beta.environments.work_stop_params:WorkStopParams",
    "resource_add": "anthropic.types.beta.sessions.resource_add_params:ResourceAddParams",
    "resource_update": (
        "anthropic.types.beta.sessions.resource_update_params:ResourceUpdateParams"
    ),
    # resources.add of a repository (the SDK's add takes files; its shape is create's)
    "repository_add": (
        "anthropic.types.beta.beta_managed_agents_github_repository_resource_params:"
        "BetaManagedAgentsGitHubRepositoryResourceParams"
    ),
    # stead's own admin bodies (the SDK has none for webhook endpoints)
    "webhook_create": "stead.schemas.webhook_params:WebhookCreateParams",
    "webhook_update": "stead.schemas.webhook_params:WebhookUpdateParams",
    "memory_store_create": (
        "anthropic.types.beta.memory_store_create_params:MemoryStoreCreateParams"
    ),
    "memory_store_update": (
        "anthropic.types.beta.memory_store_update_params:MemoryStoreUpdateParams"
    ),
    "memory_create": "anthropic.types.beta.memory_stores.memory_create_params:MemoryCreateParams",
    "memory_update": "anthropic.types.beta.memory_stores.memory_update_params:MemoryUpdateParams",
}
"""Each generated file's name -> the SDK params type it is derived from."""
PATH_PARAMS = {
    "credential_update": ("vault_id",),
    "work_update": ("environment_id",),
    "work_stop": ("environment_id",),
    "resource_update": ("session_id",),
    "memory_create": ("view",),
    "memory_update": ("memory_store_id", "view"),
}
"""Fields the SDK sends in the URL, not the body, of a params type that has them."""
EVENT_TYPES = "anthropic.types.beta.sessions:BetaManagedAgentsSessionEventType"
"""The SDK's session event type names, written to ``event_types.py``."""
EVENT_TYPES_FILE = Path(__file__).with_name("event_types.py")
DISCRIMINATORS = ("type", "name")
STRICT_SCALARS = ("int", "float", "bool", "str")
"""Core schema types validated strictly (an int is an int; JSON has no other)."""
REF_ID = re.compile(r":\d+$")


def tightened(name: str) -> Schema:
    """The tightened core schema of ``PARAMS[name]``, as live Python objects."""
    schema: Schema = copy.deepcopy(dict(TypeAdapter(_sdk_type(name)).core_schema))
    defs = definitions(schema)
    top = resolve(schema, defs)
    for field in (*HEADER_PARAMS, *PATH_PARAMS.get(name, ())):
        top.get("fields", {}).pop(field, None)
    _tighten(schema, defs)
    return schema


def json_schema(name: str, ref_template: str) -> dict[str, Any]:
    """The JSON schema of ``PARAMS[name]`` as validated, with the SDK's titles and
    descriptions (which the shipped files leave out)."""
    generator = GenerateJsonSchema(ref_template=ref_template)
    return generator.generate(tightened(name), mode="validation")


def rendered(name: str) -> str:
    """The text of ``params/<name>.json``."""
    schema = tightened(name)
    return json.dumps(_portable(schema, definitions(schema)), indent=1) + "\n"


def event_types_module() -> str:
    """The text of ``event_types.py``: the SDK's event type names as a ``Literal``."""
    names = "".join(f'    "{name}",\n' for name in typing.get_args(_imported(EVENT_TYPES)))
    return (
        f'"""The SDK\'s session event type names (``{EVENT_TYPES.partition(":")[2]}``).\n\n'
        "Generated by ``python -m stead.schemas.generate`` from the installed SDK; do not edit.\n"
        '"""\n\nfrom typing import Literal\n\n'
        f"SessionEventType = Literal[\n{names}]\n"
    )


def main() -> None:
    PARAMS_DIR.mkdir(exist_ok=True)
    for name in PARAMS:
        (PARAMS_DIR / f"{name}.json").write_text(rendered(name))
    EVENT_TYPES_FILE.write_text(event_types_module())
    print(f"wrote {len(PARAMS)} schemas to {PARAMS_DIR} and {EVENT_TYPES_FILE}", file=sys.stderr)


def _sdk_type(name: str) -> Any:
    return _imported(PARAMS[name])


def _imported(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def _portable(node: Any, defs: Mapping[str, Schema]) -> Any:
    if isinstance(node, dict):
        if node.get("type") == "union":
            node = {**node, "choices": [_labelled(c, defs) for c in node["choices"]]}
        return {
            k: REF_ID.sub("", v) if k in ("ref", "schema_ref") else _portable(v, defs)
            for k, v in node.items()
            if k != "serialization" and not (k == "cls" and node.get("type") == "typed-dict")
        }
    if isinstance(node, list | tuple):
        return [_portable(item, defs) for item in node]
    if node is None or isinstance(node, str | int | float | bool):
        return node
    return {IMPORT: _import_path(node)}


def _labelled(choice: Any, defs: Mapping[str, Schema]) -> Any:
    # pydantic-core labels a TypedDict branch (or a reference to one) by its
    # class; without ``cls`` every such branch would be "typed-dict", so the
    # label is made explicit.
    if isinstance(choice, tuple | list):
        return choice
    target = defs[choice["schema_ref"]] if choice.get("type") == "definition-ref" else choice
    cls = target.get("cls") if target.get("type") == "typed-dict" else None
    return choice if cls is None else (choice, cls.__name__)


def _import_path(obj: Any) -> str:
    module = obj.__module__
    name = getattr(obj, "__qualname__", None) or getattr(obj, "_name", None)
    if name is None or getattr(importlib.import_module(module), name, None) is not obj:
        raise TypeError(f"{obj!r} in a params schema cannot be named for import")
    return f"{module}:{name}"


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
    elif kind == "literal":
        # ``typing`` caches ``Literal[a, b]`` and ``Literal[b, a]`` as one (they
        # compare equal), so the SDK's order depends on what was built first.
        node["expected"] = sorted(node["expected"], key=repr)
    elif kind == "union":
        _collapse_union(node, defs)
    elif kind in STRICT_SCALARS:
        node["strict"] = True
    for value in list(node.values()):
        _tighten(value, defs)


def _collapse_union(node: Schema, defs: Mapping[str, Schema]) -> None:
    choices = [branch(c) for c in node["choices"]]
    resolved = [resolve(c, defs) for c in choices]
    kinds = {r.get("type") for r in resolved}
    if "str" in kinds and "literal" in kinds:
        kept = [
            c for c, r in zip(node["choices"], resolved, strict=True) if r.get("type") != "literal"
        ]
        if len(kept) == 1:
            node.clear()
            node.update(branch(kept[0]))
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


if __name__ == "__main__":
    main()
