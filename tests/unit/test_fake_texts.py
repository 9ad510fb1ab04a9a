"""The fake model keeps the texts of what requests repeat (``Texts``), and what
it derives from them is exactly what encoding each request afresh gives: the
digest a reply's ids come from, and the prompt cache's usage, for any JSON
hypothesis draws, in any order, with the oldest texts dropped on the way and
values that equality mixes up (``True``, ``1`` and ``1.0``) kept apart."""

from __future__ import annotations

import hashlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stead.jsonvalues import canonical
from stead.testing._anthropic_wire import PromptCache
from stead.testing._wire import Texts

_leaves = st.none() | st.booleans() | st.integers(-2, 2) | st.floats() | st.text(max_size=6)
_json = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["type", "text", "n", "input"]), inner, max_size=3)
    ),
    max_leaves=12,
)
_block = st.dictionaries(
    st.sampled_from(["type", "text", "cache_control", "input", "content"]), _json, max_size=4
)
_message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.text(max_size=8) | st.lists(_block, max_size=3),
    }
)
_body = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["m", "n"]),
        "max_tokens": st.integers(1, 3),
        "messages": st.lists(_message, min_size=1, max_size=5),
    },
    optional={
        "stream": st.booleans(),
        "system": st.text(max_size=8) | st.lists(_block, max_size=2),
        "tools": st.lists(_block, max_size=2),
        "metadata": _json,
        "cache_control": st.just({"type": "ephemeral"}),
    },
)


def afresh(body: dict[str, Any]) -> str:
    asked = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    return hashlib.sha256(canonical(asked).encode()).hexdigest()


@settings(max_examples=100, deadline=None)
@given(st.lists(_body, min_size=1, max_size=5))
def test_a_digest_from_kept_texts_is_the_digest_of_the_request_encoded_afresh(
    bodies: list[dict[str, Any]],
) -> None:
    texts = Texts(limit=6)  # small: texts are dropped and made again on the way
    for body in bodies:
        assert texts.request_digest(body) == afresh(body)


@settings(max_examples=100, deadline=None)
@given(st.lists(_body, min_size=1, max_size=5))
def test_usage_from_kept_texts_is_usage_from_texts_encoded_afresh(
    bodies: list[dict[str, Any]],
) -> None:
    kept, fresh = PromptCache(Texts()), PromptCache(Texts(limit=1))
    for body in bodies:
        assert kept.usage(body, 5) == fresh.usage(body, 5)


def test_values_equality_mixes_up_are_kept_apart() -> None:
    def asking(value: object) -> dict[str, Any]:
        block = {"type": "text", "text": "hi", "n": value}
        return {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [block]}]}

    texts = Texts()
    bodies = [asking(1), asking(True), asking(1.0), asking(1)]
    digests = [texts.request_digest(body) for body in bodies]
    assert digests == [afresh(body) for body in bodies]
    assert len(set(digests)) == 3
