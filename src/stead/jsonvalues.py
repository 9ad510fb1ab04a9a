"""JSON values stead can hold: what a body may contain, and how to heal a stored one.

Every value stead accepts is written to the store and rendered back in later
responses, streams and model requests, so a value is only acceptable if each of
those round-trips it. That rules out, wherever they appear (free-form objects
such as tool schemas and metadata included):

* non-finite numbers (``NaN``, ``Infinity``, and literals like ``1e400`` that
  overflow to infinity): strict JSON encoders refuse them;
* integers outside the signed 64-bit range: SQL columns and most JSON readers
  cannot hold them;
* strings (and keys) with an unpaired UTF-16 surrogate: they cannot be encoded
  as UTF-8;
* nesting deeper than ``MAX_DEPTH``;
* an object with the same key twice (parsing only: the second would silently win).

``loads`` parses a request body under these rules; ``problem`` checks a value
already in memory; ``repaired`` turns a value stored before these rules into one
that renders (used by the ``0004`` migration, ``stead db check`` and the
responses' last-resort fallback); ``weight`` tells roughly how much memory a
value holds (caches bound themselves by it). Imports nothing from stead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Json = dict[str, Any]
"""A JSON object as stead passes it around."""

MAX_DEPTH = 64
"""Objects and arrays nested deeper than this are refused (the SDK's own shapes nest < 10)."""
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
_INT_DIGITS = len(str(INT_MAX))


class JsonValueError(ValueError):
    """A value stead cannot hold; ``str()`` starts with the field path."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class _Refused:
    """Stands in, during parsing, for a literal that ``problem`` then reports with its path."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _DuplicateKeys(dict[str, Any]):
    __slots__ = ("duplicate",)

    def __init__(self, pairs: list[tuple[str, Any]], duplicate: str) -> None:
        super().__init__(pairs)
        self.duplicate = duplicate


def _parse_int(text: str) -> int | _Refused:
    # Checked by length first: int() of thousands of digits raises (or takes quadratic time).
    if len(text.lstrip("-")) > _INT_DIGITS:
        return _Refused(f"the integer {_abbreviated(text)} is outside the 64-bit range")
    value = int(text)
    if not INT_MIN <= value <= INT_MAX:
        return _Refused(f"the integer {text} is outside the 64-bit range")
    return value


def _parse_float(text: str) -> float | _Refused:
    value = float(text)
    if not math.isfinite(value):
        return _Refused(f"the number {_abbreviated(text)} is too large to represent")
    return value


def _parse_constant(name: str) -> _Refused:
    return _Refused(f"{name} is not a JSON number")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return _DuplicateKeys(pairs, key)
        seen.add(key)
    return dict(pairs)


def canonical(value: Any) -> str:
    """``value`` in one canonical form: keys sorted, no spaces, text as is. Op keys
    hash it, and a model request is sent in it (its form computed once)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_array(texts: Iterable[str]) -> str:
    """``canonical`` of a list whose items' canonical texts are ``texts``."""
    return "[" + ",".join(texts) + "]"


def canonical_object(value: Mapping[str, Any], member: Callable[[str, Any], str]) -> str:
    """``canonical(value)`` put together from each member's text, ``member(key,
    value)``: for a caller that holds some of them encoded already (a long
    conversation's messages), which ``canonical`` would encode again."""
    items = sorted(value.items(), key=lambda item: item[0])
    return "{" + ",".join(f"{canonical(key)}:{member(key, v)}" for key, v in items) + "}"


NODE_WEIGHT = 64
"""What ``weight`` counts for each value besides its text: about what CPython
spends on a small object, a dict entry or a list slot."""


def weight(value: Any) -> int:
    """Roughly the bytes ``value`` holds: its strings' lengths and keys', plus
    ``NODE_WEIGHT`` a value. Cheap enough to take once per value a cache keeps
    (a long string costs what a short one does), exact enough to bound one by
    memory rather than by count: an event of an image tool result is five
    megabytes, one of a status change a few dozen bytes."""
    total = 0
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        total += NODE_WEIGHT
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += sum(len(key) for key in item if isinstance(key, str))
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def loads(raw: bytes | str, *, root: str = "body") -> Any:
    """Parses JSON text under the rules above; raises ``JsonValueError`` naming the path."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise JsonValueError(root, f"not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_parse_constant,
            object_pairs_hook=_object,
        )
    except json.JSONDecodeError as exc:
        raise JsonValueError(root, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise JsonValueError(root, f"nested deeper than {MAX_DEPTH} levels") from None
    found = problem(value, root=root)
    if found is not None:
        raise JsonValueError(*found)
    return value


def problem(value: Any, *, root: str = "body") -> tuple[str, str] | None:
    """The first (path, reason) that stops ``value`` from round-tripping, or None."""
    stack: list[tuple[Any, str, int]] = [(value, root, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, dict):
            if depth >= MAX_DEPTH:
                return path, f"nested deeper than {MAX_DEPTH} levels"
            if isinstance(node, _DuplicateKeys):
                return _join(path, node.duplicate), "this key appears more than once"
            for key, item in node.items():
                if not isinstance(key, str):
                    return path, f"a key is a {type(key).__name__}, not a string"
                if not _encodable(key):
                    return _join(path, key), "the key holds an unpaired UTF-16 surrogate"
                stack.append((item, _join(path, key), depth + 1))
        elif isinstance(node, list | tuple):
            if depth >= MAX_DEPTH:
                return path, f"nested deeper than {MAX_DEPTH} levels"
            stack.extend((item, f"{path}.{i}", depth + 1) for i, item in enumerate(node))
        elif isinstance(node, str):
            if not _encodable(node):
                return path, "the string holds an unpaired UTF-16 surrogate"
        elif isinstance(node, _Refused):
            return path, node.reason
        elif isinstance(node, bool) or node is None:
            continue
        elif isinstance(node, int):
            if not INT_MIN <= node <= INT_MAX:
                return path, "the integer is outside the 64-bit range"
        elif isinstance(node, float):
            if not math.isfinite(node):
                return path, "the number is not finite"
        else:
            return path, f"a {type(node).__name__} is not a JSON value"
    return None


def repaired(value: Any) -> Any:
    """``value`` with whatever ``problem`` would report replaced by something renderable:
    non-finite numbers and out-of-range integers become null, unpaired surrogates U+FFFD."""
    if isinstance(value, dict):
        return {_repaired_text(str(k)): repaired(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [repaired(v) for v in value]
    if isinstance(value, str):
        return _repaired_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if INT_MIN <= value <= INT_MAX else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return None


def dumps_checked(value: Any) -> str:
    """The store's serialiser: what it writes, its reads can render.

    ``allow_nan=False`` and the UTF-8 encode reject the two classes a later read
    could not render; raising here keeps the whole write from being committed.
    """
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        found = problem(value, root="value")
        path, reason = found if found is not None else ("value", str(exc))
        raise JsonValueError(path, reason) from None
    return text


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _repaired_text(text: str) -> str:
    if _encodable(text):
        return text
    # Any surrogate left in a Python string is unpaired: json pairs the valid ones.
    return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _join(path: str, key: str) -> str:
    shown = key if key.isidentifier() else json.dumps(key)
    return f"{path}.{shown}"


def _abbreviated(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:10]}…({len(text)} characters)"
