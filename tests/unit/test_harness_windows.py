"""The request-size estimate and the dangling model-request span, which every
model step computes over the whole request and log."""

from __future__ import annotations

import random
import zlib
from base64 import b64encode
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stead.harness.pdfpages import count_pages
from stead.harness.windows import (
    CHARS_PER_TOKEN,
    MEDIA_TOKENS,
    PDF_BYTES_PER_PAGE,
    PDF_PAGE_TOKENS,
    MediaTokens,
    estimate_tokens,
    pdf_tokens,
    tokens_at_most,
)
from stead.jsonvalues import canonical
from stead.runtime.plan import dangling_span
from tests.pdfs import HEADER, pdf, pdf_base64


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


def test_an_image_counts_a_fixed_size_whatever_its_bytes() -> None:
    image = {"type": "base64", "media_type": "image/png", "data": "A" * 100_000}
    assert estimate_tokens([image]) == MEDIA_TOKENS
    assert estimate_tokens(Frozen(**image)) == MEDIA_TOKENS


@pytest.mark.parametrize("block", ["image", "document"])
def test_a_source_by_url_counts_at_least_as_an_image(block: str) -> None:
    """stead never fetches it, so an image's size and a PDF's pages are unknown:
    counted as the URL's characters, some 10 tokens, a request of many went
    out far over the window (an image costs up to 1,600, a PDF 3,000 a page)."""
    source = {"type": "url", "url": "https://example.com/a"}
    request = {"messages": [{"role": "user", "content": [{"type": block, "source": source}]}]}
    assert estimate_tokens(source) == MEDIA_TOKENS
    assert MEDIA_TOKENS < estimate_tokens(request) < MEDIA_TOKENS + 20
    long = {"type": "url", "url": "https://example.com/" + "a" * 8_000}
    assert estimate_tokens(long) == (len("typeurlurl") + 8_020) // CHARS_PER_TOKEN
    bound = tokens_at_most(canonical(request))
    assert bound is not None and estimate_tokens(request) <= bound < estimate_tokens(request) + 20


def document(data: str, **more: str) -> dict[str, Any]:
    return {"type": "base64", "media_type": "application/pdf", "data": data, **more}


@pytest.mark.parametrize("object_streams", [False, True], ids=["table", "object-streams"])
@pytest.mark.parametrize("saved_again", [False, True], ids=["saved-once", "saved-again"])
@pytest.mark.parametrize("pages", [1, 3, 40])
def test_a_pdf_counts_its_pages(pages: int, object_streams: bool, saved_again: bool) -> None:
    """Pages stand in the file or in a compressed object stream; a file saved
    again incrementally holds each edited page twice, once counted."""
    data = pdf_base64(pages, object_streams=object_streams, saved_again=saved_again)
    assert estimate_tokens([document(data)]) == pages * PDF_PAGE_TOKENS
    assert estimate_tokens(Frozen(**document(data))) == pages * PDF_PAGE_TOKENS
    # A page's weight in bytes is no measure: one heavy stream, three pages.
    heavy = pdf_base64(3, object_streams=object_streams, filler=300_000)
    assert estimate_tokens(document(heavy)) == 3 * PDF_PAGE_TOKENS


def test_a_pdf_whose_pages_cannot_be_counted_counts_by_its_size() -> None:
    """An object stream under a filter not read here, one that inflates past the
    bound (a deflate bomb), a damaged file: one page a ``PDF_BYTES_PER_PAGE``."""
    lzw = pdf(3, object_streams=True).replace(b"/FlateDecode /Length", b"/LZWDecode /Length", 1)
    bomb = zlib.compress(bytes(65 * 1024 * 1024), 9)
    stream = b"<< /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode /Length %d >>" % len(bomb)
    bombed = HEADER + b"1 0 obj\n" + stream + b"\nstream\n" + bomb + b"\nendstream\nendobj\n"
    damaged = HEADER + random.Random(1).randbytes(3 * PDF_BYTES_PER_PAGE - 100)
    for file in (lzw, bombed, damaged):
        assert count_pages(file) is None
        pages = -(-len(file) // PDF_BYTES_PER_PAGE)
        assert pdf_tokens(b64encode(file).decode()) == pages * PDF_PAGE_TOKENS
    assert pdf_tokens(b64encode(damaged).decode()) == 3 * PDF_PAGE_TOKENS


def _many_object_streams_then_pages() -> bytes:
    streams = b"%d 0 obj <</Type/ObjStm/First 0>>stream\nX\nendstream endobj\n"
    pages = b"%d 0 obj <</Type/Page>> endobj\n"
    return (
        HEADER
        + b"".join(streams % i for i in range(20_000))
        + b"".join(pages % (20_000 + i) for i in range(200_000))
    )


def _one_dictionary_of_object_stream_types() -> bytes:
    marks = b"/Type/ObjStm " * 60_000
    return HEADER + b"1 0 obj <<" + marks + b"/First 0>>stream\nX\nendstream endobj\n"


@pytest.mark.timeout(60)  # a hang guard: each took the count many minutes
@pytest.mark.parametrize(
    ("made", "pages"),
    [
        (_many_object_streams_then_pages, 200_000),
        (_one_dictionary_of_object_stream_types, None),
        (lambda: HEADER + b"/Type/Page " * 300_000, 300_000),
    ],
    ids=["streams-then-pages", "one-dictionary", "no-object-headers"],
)
def test_a_pdf_made_to_be_slow_to_count_is_counted_in_one_pass(
    made: Callable[[], bytes], pages: int | None
) -> None:
    """A PDF comes from the session's users and is counted on the brain's event
    loop: no shape of it makes the count scan the file once per page or per
    object stream (a 4 MB one held the loop for a minute; every session of the
    server waited)."""
    assert count_pages(made()) == pages


def test_a_source_that_is_no_pdf_as_the_api_takes_it_counts_as_an_image() -> None:
    """Data that is no base64 is no file to count (the API refuses it); a source
    with other keys beside the API's three is none the API takes."""
    for data in ("not base64!", "QUJD\n", "Ã©"):
        assert estimate_tokens(document(data)) == MEDIA_TOKENS
    assert estimate_tokens(document(SMALL_PDF, title="t")) == MEDIA_TOKENS


def test_pdfs_are_counted_once_and_the_counts_kept_are_bounded() -> None:
    media = MediaTokens(most=2)
    first, other = pdf_base64(3), pdf_base64(5, object_streams=True)
    assert media.pdf(first) == media.pdf("".join(first)) == 3 * PDF_PAGE_TOKENS
    assert len(media) == 1  # one count for equal data, wherever it came from
    request = {
        "messages": [{"role": "user", "content": [{"type": "document", "source": document(other)}]}]
    }
    assert estimate_tokens(request, media) == estimate_tokens(request)
    assert len(media) == 2
    assert media.pdf(pdf_base64(7)) == 7 * PDF_PAGE_TOKENS and len(media) == 2


def test_the_bound_leaves_an_images_data_out_and_leaves_a_pdf_to_the_walk() -> None:
    """An image's data is no measure of it: counted as characters, a session
    that holds one was walked at every step. A PDF's pages are read from its
    bytes, which the walk finds without reading them again."""
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 400_000},
    }
    text = {"type": "text", "text": "t" * 4_000}
    request = {"messages": [{"role": "user", "content": [text, image, image]}]}
    bound = tokens_at_most(canonical(request))
    assert bound is not None and estimate_tokens(request) <= bound < estimate_tokens(request) + 100
    with_pdf = {"type": "document", "source": document(SMALL_PDF)}
    request["messages"][0]["content"].append(with_pdf)
    assert tokens_at_most(canonical(request)) is None


def _counted(value: Any) -> int:
    """The estimate's definition, written as plainly as it reads."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, Mapping):
        if value.get("type") == "base64" and "data" in value:
            pdf_source = value.get("media_type") == "application/pdf" and len(value) == 3
            if pdf_source and isinstance(value["data"], str):
                return pdf_tokens(value["data"]) * CHARS_PER_TOKEN
            return MEDIA_TOKENS * CHARS_PER_TOKEN
        held = sum(len(str(k)) + _counted(v) for k, v in value.items())
        if value.get("type") == "url" and "url" in value:
            return max(held, MEDIA_TOKENS * CHARS_PER_TOKEN)
        return held
    if isinstance(value, list | tuple):
        return sum(_counted(v) for v in value)
    return len(str(value))


SMALL_PDF = pdf_base64(3)
_media_types = st.sampled_from(["application/pdf", "image/png", 'a"b'])
_sources = st.fixed_dictionaries(
    {
        "type": st.just("base64"),
        "media_type": _media_types,
        "data": st.sampled_from([SMALL_PDF, "AAAA", "no base64!", 'a"b', "a\\b"]) | st.integers(),
    }
)
_urls = st.fixed_dictionaries(
    {"type": st.just("url"), "url": st.sampled_from(["https://e.com/a.png", "u" * 7000, 'a"b'])}
)
_leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_json = st.recursive(
    _leaves | st.just("base64") | st.just("url") | st.just("application/pdf") | _sources | _urls,
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.tuples(inner, inner)
        | st.dictionaries(
            st.sampled_from(["type", "data", "text", "content", "n", "media_type", "url"]),
            inner,
            max_size=5,
        )
        | st.dictionaries(st.integers(), inner, max_size=3)
    ),
    max_leaves=40,
)


def test_the_bound_of_a_request_with_small_media_counts_each_at_its_fixed_size() -> None:
    tiny = {"type": "base64", "media_type": "image/png", "data": "AAAA"}
    request = {"messages": [{"role": "user", "content": [{"type": "image", "source": tiny}] * 3}]}
    assert estimate_tokens(request) > len(canonical(request)) // CHARS_PER_TOKEN
    bound = tokens_at_most(canonical(request))
    assert bound is not None and bound >= estimate_tokens(request)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_the_bound_from_canonical_json_is_never_below_the_estimate(value: Any) -> None:
    """None: the value holds a PDF, which only the walk counts."""
    bound = tokens_at_most(canonical(value))
    assert bound is None or bound >= estimate_tokens(value)


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
