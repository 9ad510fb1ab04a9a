"""The shipped request schemas (``stead/schemas/params/*.json``) are the SDK's.

They are generated from the installed ``anthropic`` SDK; these tests regenerate
them and fail on any drift, and check that a validator loaded from a file
accepts, rejects and explains exactly as one built from the SDK does.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError
from pydantic_core import SchemaValidator

from stead.schemas import RequestError, StrictParams, generate
from stead.schemas.validation import PARAMS_DIR

REFRESH = "python -m stead.schemas.generate"
SAMPLES = 300


@pytest.mark.parametrize("name", sorted(generate.PARAMS))
def test_the_shipped_schema_is_the_installed_sdks(name: str) -> None:
    path = PARAMS_DIR / f"{name}.json"
    assert path.exists(), f"{path.name} is missing: run `{REFRESH}`"
    assert path.read_text() == generate.rendered(name), (
        f"{path.name} differs from the installed anthropic SDK's {generate.PARAMS[name]}: "
        f"run `{REFRESH}` and review the diff"
    )


def test_the_event_type_names_are_the_installed_sdks() -> None:
    assert generate.EVENT_TYPES_FILE.read_text() == generate.event_types_module(), (
        f"{generate.EVENT_TYPES_FILE.name} differs from the installed anthropic SDK's "
        f"{generate.EVENT_TYPES}: run `{REFRESH}`"
    )


def test_every_shipped_file_is_generated() -> None:
    assert {p.stem for p in PARAMS_DIR.glob("*.json")} == set(generate.PARAMS)


@pytest.mark.parametrize("name", sorted(generate.PARAMS))
def test_a_loaded_validator_answers_as_the_sdks_does(name: str) -> None:
    loaded = StrictParams(name)
    from_sdk = _FromSdk(name)
    rng = random.Random(name)
    schema = loaded.core_schema
    defs = {d["ref"]: d for d in schema.get("definitions", [])}
    accepted = 0
    for _ in range(SAMPLES):
        body = _Sample(rng, defs).value(schema)
        expected = _outcome(from_sdk.validate, body)
        assert _outcome(loaded.validate, body) == expected, body
        accepted += isinstance(expected, dict)
    # The samples must reach both sides, or the comparison proves little.
    assert 0 < accepted < SAMPLES


class _FromSdk(StrictParams):
    """``StrictParams`` on the live schema the generator builds from the SDK."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["core_schema"] = generate.tightened(name)
        self.__dict__["_validator"] = SchemaValidator(self.core_schema)


def _outcome(validate: Any, body: Any) -> Any:
    try:
        return validate(body)
    except RequestError as exc:
        return str(exc)
    except ValidationError as exc:  # pragma: no cover - a failure shows the difference
        return repr(exc)


class _Sample:
    """Random bodies shaped by a core schema: mostly valid, sometimes off by one thing."""

    def __init__(self, rng: random.Random, defs: dict[str, Any]) -> None:
        self.rng = rng
        self.defs = defs
        self.depth = 0

    def value(self, node: dict[str, Any]) -> Any:
        if self.rng.random() < 0.02:
            return self.rng.choice([None, 7, "x", [], {}, {"unknown": 1}, 2.5, True])
        self.depth += 1
        try:
            return self._shaped(node)
        finally:
            self.depth -= 1

    def _shaped(self, node: dict[str, Any]) -> Any:
        kind = node["type"]
        if kind == "definitions":
            return self.value(node["schema"])
        if kind == "definition-ref":
            return self.value(self.defs[node["schema_ref"]])
        if kind in ("nullable", "default"):
            return None if self.rng.random() < 0.2 else self.value(node["schema"])
        if kind == "json-or-python":
            return self.value(node["json_schema"])
        if kind == "typed-dict":
            return self._typed_dict(node)
        if kind == "list":
            count = 0 if self.depth > 8 else self.rng.randint(0, 2)
            return [self.value(node.get("items_schema", {"type": "any"})) for _ in range(count)]
        if kind == "dict":
            return {"k": self.value(node.get("values_schema", {"type": "any"}))}
        if kind == "tagged-union":
            return self.value(self.rng.choice(list(node["choices"].values())))
        if kind == "union":
            choice = self.rng.choice(node["choices"])
            return self.value(choice[0] if isinstance(choice, tuple | list) else choice)
        if kind == "literal":
            return self.rng.choice(node["expected"])
        return self._scalar(kind)

    def _typed_dict(self, node: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for key, spec in node["fields"].items():
            wanted = spec.get("required", True) or (self.depth < 6 and self.rng.random() < 0.5)
            if wanted and self.rng.random() > 0.03:
                out[key] = self.value(spec["schema"])
        if self.rng.random() < 0.03:
            out["misspelt"] = 1
        return out

    def _scalar(self, kind: str) -> Any:
        return {
            "str": "s" * self.rng.randint(1, 3),
            "int": self.rng.randint(0, 5),
            "float": 1.5,
            "bool": self.rng.random() < 0.5,
        }.get(kind, {"any": 1})


@pytest.mark.parametrize(
    ("agent", "named"),
    [
        # Before, each was "agent.type: Input should be 'agent'": the other branch's error.
        ({"system": 5}, "agent.system: Input should be a valid string"),
        ({"tools": None}, "agent.tools: Input should be a valid list"),
        ({"bogus": 1}, "agent.bogus: Extra inputs are not permitted"),
        ({"type": "nope"}, "agent.type: Input should be 'agent'"),
    ],
)
def test_an_error_in_a_union_names_the_field_of_the_branch_the_type_chose(
    agent: dict[str, Any], named: str
) -> None:
    body = {"type": "agent_with_overrides", "id": "agent_1", **agent}
    with pytest.raises(RequestError) as refused:
        StrictParams("session_create").validate({"agent": body, "environment_id": "env_1"})
    assert str(refused.value) == named
