"""The request-size estimate and the dangling model-request span, which every
model step computes over the whole request and log."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stead.harness.windows import CHARS_PER_TOKEN, MEDIA_TOKENS, estimate_tokens, tokens_at_most
from stead.jsonvalues import canonical
from stead.runtime.plan import dangling_span


class Frozen(Mapping[str, Any]):
    def __init__(self, **items: Any) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def test_the_estimate_counts_keys_and_values_of_any_mapping_and_sequence() -> None:
    plain = {"role": "user", "content": [{"type": "text", "text": "x" * 40}], "n": 12}
    chars = len("role") + 4 + len("content") + 4 + 4 + 4 + 40 + 1 + 2
    assert estimate_tokens(plain) == chars // CHARS_PER_TOKEN
    other = Frozen(
        role="user", content=(MappingProxyType({"type": "text", "text": "x" * 40}),), n=12
    )
    assert estimate_tokens(other) == estimate_tokens(plain)


def test_media_counts_a_fixed_size_whatever_its_bytes() -> None:
    image = {"type": "base64", "media_type": "image/png", "data": "A" * 100_000}
    assert estimate_tokens([image]) == MEDIA_TOKENS
    assert estimate_tokens(Frozen(**image)) == MEDIA_TOKENS


def _counted(value: Any) -> int:
    """The estimate's definition, written as plainly as it reads."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        if value.get("type") == "base64" and "data" in value:
            return MEDIA_TOKENS * CHARS_PER_TOKEN
        return sum(len(str(k)) + _counted(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sum(_counted(v) for v in value)
    return len(str(value))


_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_json = st.recursive(
    _leaves | st.just("base64"),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(
            st.sampled_from(["type", "data", "text", "content", "n"]), inner, max_size=5
        )
        | st.dictionaries(st.integers(), inner, max_size=3)
    ),
    max_leaves=40,
)


def test_the_bound_of_a_request_with_small_media_counts_each_at_its_fixed_size() -> None:
    tiny = {"type": "base64", "media_type": "image/png", "data": "AAAA"}
    request = {"messages": [{"role": "user", "content": [{"type": "image", "source": tiny}] * 3}]}
    assert estimate_tokens(request) > len(canonical(request)) // CHARS_PER_TOKEN
    assert tokens_at_most(canonical(request)) >= estimate_tokens(request)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_the_bound_from_canonical_json_is_never_below_the_estimate(value: Any) -> None:
    assert tokens_at_most(canonical(value)) >= estimate_tokens(value)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_the_estimate_is_its_definition_on_any_json(value: Any) -> None:
    assert estimate_tokens(value) == _counted(value) // CHARS_PER_TOKEN


def _start(i: int) -> dict[str, Any]:
    return {"type": "span.model_request_start", "id": f"s{i}"}


def _end(i: int) -> dict[str, Any]:
    return {"type": "span.model_request_end", "id": f"e{i}", "model_request_start_id": f"s{i}"}


def test_only_the_last_start_without_an_end_dangles() -> None:
    other = {"type": "agent.message", "id": "m"}
    assert dangling_span([]) is None
    assert dangling_span([other]) is None
    assert dangling_span([_start(1), other]) == "s1"
    assert dangling_span([_start(1), other, _end(1)]) is None
    assert dangling_span([_start(1), _end(1), _start(2), other]) == "s2"
    assert dangling_span([_start(1), _start(2), _end(2)]) is None  # an older start is not retried
