"""What a body may hold (``stead.jsonvalues``): each refusal names its path; repairs
render; a value's weight follows the memory it holds."""

from __future__ import annotations

import json
import math

import pytest

from stead.jsonvalues import (
    MAX_DEPTH,
    NODE_WEIGHT,
    JsonValueError,
    dumps_checked,
    loads,
    problem,
    repaired,
    weight,
)


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ('{"a": 9223372036854775808}', "body.a"),
        ('{"a": -9223372036854775809}', "body.a"),
        ('{"a": [1, ' + "7" * 5000 + "]}", "body.a.1"),
        ('{"a": {"b": 1e400}}', "body.a.b"),
        ('{"a": -1e309}', "body.a"),
        ('{"a": NaN}', "body.a"),
        ('{"a": -Infinity}', "body.a"),
        ('{"a": "x\\ud800"}', "body.a"),
        ('{"\\udfff": 1}', 'body."\\udfff"'),
        ('{"a": 1, "a": 2}', "body.a"),
        ('{"a": {"my key": 1, "my key": 2}}', 'body.a."my key"'),
        ('{"a": ' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}", "body.a"),
        ("[" * 100_000 + "]" * 100_000, "body"),
        ('{"a": ', "body"),
        (b'{"a": "\xff"}', "body"),
    ],
)
def test_each_refusal_names_its_path(text: str | bytes, path: str) -> None:
    with pytest.raises(JsonValueError) as refused:
        loads(text)
    assert refused.value.path.startswith(path), refused.value


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 9223372036854775807, "b": -9223372036854775808}',
        '{"a": 1.7976931348623157e308, "b": 5e-324, "c": -0.0}',
        '{"a": "\\ud83d\\ude00 \\u00e9", "b": null, "c": [true, false]}',
        '{"a": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}",
    ],
)
def test_values_at_the_edge_are_accepted_and_round_trip(text: str) -> None:
    value = loads(text)
    assert loads(dumps_checked(value)) == value


def test_problem_and_repair_of_values_already_in_memory() -> None:
    stored = {"max": math.inf, "list": [math.nan, 2**70, "ok\udc00"], "\ud800": 1}
    assert problem(stored) is not None
    healed = repaired(stored)
    assert healed == {"max": None, "list": [None, None, "ok\ufffd"], "\ufffd": 1}
    assert problem(healed) is None
    json.dumps(healed, allow_nan=False).encode()


def test_the_store_serialiser_refuses_what_it_could_not_render() -> None:
    with pytest.raises(JsonValueError, match=r"value\.tools\.0\.max: the number is not finite"):
        dumps_checked({"tools": [{"max": math.inf}]})
    with pytest.raises(JsonValueError, match="surrogate"):
        dumps_checked({"a": "\ud800"})


def test_a_value_weighs_its_text_and_a_little_for_each_part() -> None:
    assert weight("x" * 1_000_000) == 1_000_000 + NODE_WEIGHT
    assert weight(None) == weight(7) == weight(True) == NODE_WEIGHT
    event = {"type": "user.message", "content": [{"type": "text", "text": "hello"}]}
    # Six values (the object, its type, the list, the block, its type and text),
    # the keys' text and the strings'.
    keys = len("type") + len("content") + len("type") + len("text")
    strings = len("user.message") + len("text") + len("hello")
    assert weight(event) == 6 * NODE_WEIGHT + keys + strings
    # An image's tool result outweighs any number of small events' worth of nodes.
    image = {"type": "image", "source": {"type": "base64", "data": "A" * 5_000_000}}
    assert weight(image) > 5_000_000 > 1_000 * weight(event)
    # Tuples weigh as lists do (renderings hold their blocks in them).
    assert weight((event, event)) == weight([event, event])
