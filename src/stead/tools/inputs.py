"""Checks a tool call's ``input`` and turns it into a typed record.

The model writes these inputs, so a wrong one is the model's to fix: it raises
``InputError`` with a message meant for the model, never anything else. Unknown
fields are ignored; ``null`` counts as absent; a float with an integral value
counts as an integer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class InputError(Exception):
    """A tool input the model has to correct; ``str()`` is the message for it."""


@dataclass(frozen=True, slots=True)
class BashInput:
    command: str | None
    restart: bool
    timeout_ms: int | None


@dataclass(frozen=True, slots=True)
class ReadInput:
    file_path: str
    view_range: tuple[int, int] | None


@dataclass(frozen=True, slots=True)
class WriteInput:
    file_path: str
    content: str


@dataclass(frozen=True, slots=True)
class EditInput:
    file_path: str
    old_string: str
    new_string: str
    replace_all: bool


@dataclass(frozen=True, slots=True)
class SearchInput:
    """The input of ``glob`` and of ``grep``."""

    pattern: str
    path: str | None


@dataclass(frozen=True, slots=True)
class WebFetchInput:
    url: str


@dataclass(frozen=True, slots=True)
class WebSearchInput:
    query: str


ToolInput = (
    BashInput | ReadInput | WriteInput | EditInput | SearchInput | WebFetchInput | WebSearchInput
)


def parse_input(tool: str, raw: object) -> ToolInput:
    if not isinstance(raw, dict):
        raise InputError(f"{tool}: the input must be a JSON object, got {_kind(raw)}")
    fields = _Fields(tool, raw)
    if tool == "bash":
        return BashInput(
            fields.text("command", required=False),
            fields.flag("restart"),
            fields.integer("timeout_ms"),
        )
    if tool == "read":
        return ReadInput(fields.path("file_path"), fields.view_range())
    if tool == "write":
        return WriteInput(fields.path("file_path"), fields.required_text("content"))
    if tool == "edit":
        return EditInput(
            fields.path("file_path"),
            fields.required_text("old_string"),
            fields.required_text("new_string"),
            fields.flag("replace_all"),
        )
    if tool in ("glob", "grep"):
        return SearchInput(fields.required_text("pattern"), fields.text("path", required=False))
    if tool == "web_fetch":
        return WebFetchInput(fields.path("url"))
    if tool == "web_search":
        return WebSearchInput(fields.path("query"))
    raise InputError(f"unknown tool {tool!r}")


class _Fields:
    def __init__(self, tool: str, raw: dict[str, Any]) -> None:
        self._tool = tool
        self._raw = raw

    def text(self, name: str, *, required: bool) -> str | None:
        value = self._raw.get(name)
        if value is None:
            if required:
                raise InputError(f"{self._tool}: {name} is required")
            return None
        if not isinstance(value, str):
            raise self._wrong(name, "a string", value)
        return value

    def required_text(self, name: str) -> str:
        value = self.text(name, required=True)
        assert value is not None
        return value

    def path(self, name: str) -> str:
        value = self.required_text(name)
        if not value:
            raise InputError(f"{self._tool}: {name} must not be empty")
        return value

    def flag(self, name: str) -> bool:
        value = self._raw.get(name)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self._wrong(name, "a boolean", value)
        return value

    def integer(self, name: str) -> int | None:
        value = self._raw.get(name)
        if value is None:
            return None
        number = _as_int(value)
        if number is None:
            raise self._wrong(name, "an integer", value)
        return number

    def view_range(self) -> tuple[int, int] | None:
        value = self._raw.get("view_range")
        if value is None:
            return None
        bounds = [_as_int(v) for v in value] if isinstance(value, list) else []
        if len(bounds) != 2 or bounds[0] is None or bounds[1] is None:
            raise InputError(
                f"{self._tool}: view_range must be [start_line, end_line] (two integers)"
            )
        return bounds[0], bounds[1]

    def _wrong(self, name: str, expected: str, value: object) -> InputError:
        return InputError(f"{self._tool}: {name} must be {expected}, got {_kind(value)}")


def _as_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _kind(value: object) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names |= {list: "an array", dict: "an object", type(None): "null"}
    return names.get(type(value), type(value).__name__)
