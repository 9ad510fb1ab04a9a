"""How many tokens a model's context window holds, and how full a request is.

The count of a request is an estimate made from the request alone (about four
characters a token; media sent as bytes by what the API makes of them), so
the same log gives the same count in every process. The model's own count of
the last request it answered, or refused as longer than its window, which the
log records, takes over when it is larger (``compaction.py``).

Media sent as bytes (a ``base64`` source): an image counts ``MEDIA_TOKENS``
whatever its bytes; a PDF ``PDF_PAGE_TOKENS`` a page, its bytes decoded and
its pages counted once (``pdfpages.py``), then kept per PDF by ``MediaTokens``;
a PDF whose pages cannot be counted is estimated by its size. A source by URL
(an image's or a PDF's) counts ``MEDIA_TOKENS``, or its characters if more:
stead never fetches what it names (the model's API does), so an image's size
and a PDF's pages are unknown here; an image costs the model up to that, a PDF
``PDF_PAGE_TOKENS`` a page, so a PDF by URL counts as a page or so short, and
the model's count corrects the estimate. A source by file id never reaches a request:
stead's API refuses one in an event (``schemas/events.py``), as it passes
none on to the model; a file stead holds reaches the model as base64 (the
read tool's, from the sandbox it is mounted in), counted as such.
"""

from __future__ import annotations

import binascii
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from stead.harness.pdfpages import count_pages

CLAUDE_WINDOW = 200_000
"""Every current Claude model's window without a long-context beta (stead
sends none)."""
OPENAI_COMPATIBLE_WINDOW = 128_000
"""A model an OpenAI-compatible server answers, unless configured."""
CHARS_PER_TOKEN = 4
MEDIA_TOKENS = 1_600
"""An image sent as bytes or by URL, and a PDF by URL: about what a full-size
image costs (the API scales a larger one down to about 1.15 megapixels, some
1,600 tokens)."""
PDF = "application/pdf"
PDF_PAGE_TOKENS = 3_000
"""A page of a PDF sent as bytes. Anthropic's PDF support documentation: each
page costs its text, 1,500 to 3,000 tokens by how dense it is, and an image of
the page, priced as images are. The top of the text range stands for a page of
average text with its image (or a dense page's text alone): counting every
page as text and a full-size image (4,600) would refuse, as too large, PDFs of
a few dozen pages that fit."""
PDF_BYTES_PER_PAGE = 50_000
"""The pages of a PDF whose pages cannot be counted: one per this many bytes,
about a scanned page. A page of text weighs far less, so such a file is rather
undercounted than refused, and the model's count corrects it."""


def context_window(
    model: str, configured: Mapping[str, int], openai_models: Iterable[str] = ()
) -> int:
    """``configured`` (``STEAD_CONTEXT_WINDOWS``) first, then the defaults."""
    if model in configured:
        return configured[model]
    if model in set(openai_models):
        return OPENAI_COMPATIBLE_WINDOW
    return CLAUDE_WINDOW


def pdf_tokens(data: str) -> int:
    """What the PDF whose base64 is ``data`` counts: its pages, or its size when
    they cannot be counted. Data that is no PDF in base64 counts as an image (the
    API refuses it; there is nothing to count). Decoded leniently: strictly,
    twice as slow, and the API refuses what is not base64 anyway."""
    try:
        pdf = binascii.a2b_base64(data)
    except (binascii.Error, ValueError):  # ValueError: characters that are not ASCII
        return MEDIA_TOKENS
    if b"%PDF-" not in pdf[:1024]:  # readers take a header a little way in
        return MEDIA_TOKENS
    pages = count_pages(pdf) or -(-len(pdf) // PDF_BYTES_PER_PAGE) or 1
    return pages * PDF_PAGE_TOKENS


class MediaTokens:
    """``pdf_tokens`` of each PDF, worked out once: the whole request is sized
    at every model step, and a PDF's count decodes and reads megabytes. Kept by
    the data's length and ``hash`` (cached in the string, so a PDF the log
    still holds is looked up without reading it; salted per process, so a
    collision cannot be aimed at), the least recently used going past
    ``most``. Safe to use from any thread (claims plan on the store's)."""

    def __init__(self, most: int = 1024) -> None:
        self._held: OrderedDict[tuple[int, int], int] = OrderedDict()
        self._most = most
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many PDFs' counts it holds."""
        with self._lock:
            return len(self._held)

    def pdf(self, data: str) -> int:
        key = (len(data), hash(data))
        with self._lock:
            found = self._held.get(key)
            if found is not None:
                self._held.move_to_end(key)
                return found
        tokens = pdf_tokens(data)
        with self._lock:
            self._held[key] = tokens
            while len(self._held) > self._most:
                self._held.popitem(last=False)
        return tokens


def estimate_tokens(value: Any, media: MediaTokens | None = None) -> int:
    """Estimated tokens of a request's JSON (or any part of it). ``media``: the
    PDFs counted so far (without it, each PDF is counted afresh)."""
    return _chars(value, media) // CHARS_PER_TOKEN


MEDIA_MARK = '"type":"base64"'
"""How a media source's mapping shows in canonical JSON (sorted keys, no spaces)."""
URL_MARK = '"type":"url"'
"""How a source by URL shows there (``{"type":"url","url":"…"}``)."""
MARKS = re.compile('"type":"(?:base64|url)"')
"""Either mark: one scan of a request's text finds both."""
MEDIA_TYPE_KEY = '"media_type":"'
DATA_KEY = '{"data":"'


def tokens_at_most(canonical_json: str) -> int | None:
    """At least ``estimate_tokens`` of the value whose ``jsonvalues.canonical`` form
    this is, without walking the value: its JSON holds every key and text at
    least as long as it is counted (quotes, escapes and punctuation only add).
    A media source is found by its mark: one in the form the API takes
    (``data``, ``media_type`` and ``type`` alone) counts its fixed size in place
    of its data, any other (a source by URL too) its fixed size on top of all
    it holds. A long session's request is megabytes of nodes to walk; this is
    a length and one scan of the text, which is made for the op key anyway.

    None when the value may hold a PDF: its pages are counted from its bytes,
    which the walk finds without reading them again (``MediaTokens``)."""
    chars = len(canonical_json)
    media = 0
    for mark in MARKS.finditer(canonical_json):
        media += 1
        if mark[0] == URL_MARK:
            continue
        kind = _media_type_before(canonical_json, mark.start())
        if kind is not None and kind[1] == PDF:
            return None
        if kind is not None:
            chars -= _data_before(canonical_json, kind[0])
    return (chars + media * MEDIA_TOKENS * CHARS_PER_TOKEN) // CHARS_PER_TOKEN


def _media_type_before(text: str, at: int) -> tuple[int, str] | None:
    """Where ``"media_type":"`` stands, and the media type, in a source whose
    mark is at ``at`` and ends its mapping, with the media type just before it:
    ``…,"media_type":"…","type":"base64"}``."""
    if not (text.startswith("}", at + len(MEDIA_MARK)) and text.startswith('",', at - 2)):
        return None
    kind = text.rfind(MEDIA_TYPE_KEY, 0, at)
    start = kind + len(MEDIA_TYPE_KEY)
    if kind < 2 or text.find('"', start, at - 2) != -1 or not text.startswith('",', kind - 2):
        return None
    return kind, text[start : at - 2]


def _data_before(text: str, kind: int) -> int:
    """The length of the source's data when the mapping whose media type is at
    ``kind`` reads exactly ``{"data":"…","media_type":"…","type":"base64"}``,
    else 0. No unescaped quote can stand in a string, so ``{"data":"`` is found
    only where such a mapping opens, and the one quote looked for is its
    data's end (none between: it is this mapping's)."""
    opening = text.rfind(DATA_KEY, 0, kind)
    data = opening + len(DATA_KEY)
    if opening == -1 or text.find('"', data, kind - 2) != -1:
        return 0
    return kind - 2 - data


def _chars(value: Any, media: MediaTokens | None) -> int:
    """Characters of every key and value under ``value``; a media source counts
    its tokens' worth whatever its bytes. A loop over a stack, not recursion:
    this walks the whole request at every model step (thousands of nodes in a
    long session), and a call and a generator per node cost twice the counting."""
    total = 0
    pending = [value]
    while pending:
        item = pending.pop()
        # Exact types first: a request is plain dicts, lists and strings, and the
        # ABC checks below cost more than the counting.
        kind = type(item)
        if kind is str:
            total += len(item)
        elif kind is dict:
            total += _mapping_chars(item, pending, media)
        elif kind is list:
            pending.extend(item)
        elif isinstance(item, str):
            total += len(item)
        elif isinstance(item, Mapping):
            total += _mapping_chars(item, pending, media)
        elif isinstance(item, list | tuple):
            pending.extend(item)
        else:
            total += len(str(item))
    return total


def _mapping_chars(value: Mapping[Any, Any], pending: list[Any], media: MediaTokens | None) -> int:
    """The characters of ``value``'s keys (its values go on ``pending``), or a
    media source's tokens' worth."""
    kind = value.get("type")
    if kind == "base64" and "data" in value:
        return _media_tokens(value, media) * CHARS_PER_TOKEN
    if kind == "url" and "url" in value:
        held = sum(len(str(key)) for key in value) + _chars(list(value.values()), media)
        return max(held, MEDIA_TOKENS * CHARS_PER_TOKEN)
    keys = 0
    for key, item in value.items():
        keys += len(key) if type(key) is str else len(str(key))
        pending.append(item)
    return keys


def _media_tokens(source: Mapping[Any, Any], media: MediaTokens | None) -> int:
    """A PDF in the API's form (``data``, ``media_type`` and ``type`` alone) by its
    pages; any other source as an image."""
    data = source["data"]
    if source.get("media_type") != PDF or len(source) != 3 or type(data) is not str:
        return MEDIA_TOKENS
    return media.pdf(data) if media is not None else pdf_tokens(data)
