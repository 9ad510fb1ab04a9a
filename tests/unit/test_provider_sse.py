"""The providers' server-sent events decoder: whatever line endings the server
uses and wherever its chunks split the stream, the events come out whole and
in order; an event past the bound is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stead.harness.providers.sse import SseDecoder

Event = tuple[str, bytes]

kinds = st.sampled_from(["message_start", "content_block_delta", "ping", "error"])
data_lines = st.lists(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12),
    min_size=1,
    max_size=3,
)


def encoded(events: list[tuple[str, list[str]]], newline: bytes) -> bytes:
    out = b""
    for kind, lines in events:
        out += b": a comment" + newline + b"event: " + kind.encode() + newline
        out += b"".join(b"data: " + line.encode() + newline for line in lines)
        out += b"id: 7" + newline + newline
    return out


def decoded(stream: bytes, cuts: list[int], bound: int = 1 << 20) -> list[Event]:
    decoder, events, start = SseDecoder(bound), [], 0
    for cut in [*sorted(cuts), len(stream)]:
        events += decoder.feed(stream[start:cut])
        start = cut
    return events


@given(
    st.lists(st.tuples(kinds, data_lines), max_size=5),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_events_come_out_whole_wherever_the_chunks_split(
    events: list[tuple[str, list[str]]], newline: bytes, cuts: list[int]
) -> None:
    stream = encoded(events, newline)
    cuts = [min(c, len(stream)) for c in cuts]
    expected = [(kind, "\n".join(lines).encode()) for kind, lines in events]
    assert decoded(stream, cuts) == expected


def test_defaults_and_events_without_data() -> None:
    stream = b"\n\ndata:no space\n\nevent: ping\n\nevent: x\ndata\ndata: y\n\n"
    assert decoded(stream, []) == [("message", b"no space"), ("x", b"\ny")]


def test_an_event_past_the_bound_is_refused() -> None:
    decoder = SseDecoder(64)
    assert decoder.feed(b"data: " + b"x" * 40 + b"\n\n") == [("message", b"x" * 40)]
    with pytest.raises(ValueError, match="an event over 64 bytes"):
        decoder.feed(b"data: " + b"x" * 80)
