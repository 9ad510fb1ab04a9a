"""How many pages a PDF holds, read from its bytes alone: a count, not a parse
(stead has no PDF library, and needs none for this).

A page is an object whose dictionary says ``/Type /Page``. It stands in the
file itself (PDF 1.4 and older, and many later files) or inside a compressed
object stream (``/Type /ObjStm``, PDF 1.5 on, what most writers make now),
which is inflated here to be read. A file saved again incrementally holds an
edited page twice, under one object number, so pages are counted by their
object numbers. A page the file holds but its page tree no longer names (one
deleted by a later save, or kept for a link to it) counts as well: the count
errs high rather than low. None when no page is found, or an object stream
cannot be read (a filter other than Flate, encryption, a damaged or oversized
stream or dictionary): the caller then estimates from the size. Each byte is
read a bounded number of times, however the file is made.
"""

from __future__ import annotations

import bisect
import re
import zlib

MARKED = re.compile(rb"/Type\s*/(Page|ObjStm)(?![^\s/<>\[\](){}%])")
"""A page's or an object stream's type; a name ends at white space or a delimiter
(so ``/Pages``, the page tree's nodes, is not a page)."""
HEADER = re.compile(rb"(\d+)\s+\d+\s+$")
"""An object's number and generation, just before its ``obj``."""
OBJ = re.compile(rb"obj")
"""What ends an object's header (``N G obj``), found once for the whole file."""
FILTERS = re.compile(rb"/[A-Za-z0-9]+Decode\b|/Crypt\b")
MAX_DICTIONARY = 64 * 1024
"""The most an object stream's dictionary may take: one longer is not read."""
MAX_INFLATED = 64 * 1024 * 1024
"""The most the object streams of one file inflate to, in all: a file that says
more (a deflate bomb) is counted by its size."""


Page = int | tuple[int, int]
"""A page's object number; where no number reads so, its place (a stream's start,
or -1, and the offset in it)."""


class Unreadable(Exception):
    """An object stream that cannot be read here."""


def count_pages(pdf: bytes) -> int | None:
    """The pages of ``pdf`` (see the module's docstring); None if unknown. Each
    byte is scanned a bounded number of times, whatever the file holds: its
    bytes come from the session's users, and it is counted on the event loop."""
    marks = list(MARKED.finditer(pdf))
    headers = [found.start() for found in OBJ.finditer(pdf)]
    pages: set[Page] = set()
    # Each stream read: its start, and the furthest end of it and those before.
    starts: list[int] = []
    reach: list[int] = []
    left = MAX_INFLATED
    try:
        for mark in marks:
            # A mark before the end of the last stream read is in its object's
            # dictionary or in the stream itself (an object stream holds no
            # stream): read, it would read that stream again.
            if mark[1] == b"ObjStm" and not (reach and mark.start() < reach[-1]):
                head = _header(headers, mark.start())
                start, end, first, inflated = _object_stream(pdf, head, mark.start(), left)
                left -= len(inflated)
                starts.append(start)
                reach.append(max(end, reach[-1]) if reach else end)
                pages |= _pages_in_stream(inflated, first, start)
    except (Unreadable, zlib.error, ValueError):
        return None
    for mark in marks:
        at = mark.start()
        if mark[1] == b"Page" and not _in_stream(starts, reach, at):
            pages.add(_object_number(pdf, _header(headers, at), at))
    return len(pages) or None


def _header(headers: list[int], at: int) -> int:
    """Where the last ``obj`` wholly before offset ``at`` stands (-1: none):
    ``pdf.rfind(b"obj", 0, at)``, without scanning back over the file for
    each mark."""
    index = bisect.bisect_right(headers, at - len(b"obj")) - 1
    return headers[index] if index >= 0 else -1


def _in_stream(starts: list[int], reach: list[int], at: int) -> bool:
    """Whether offset ``at`` lies in one of the streams read (``starts`` in
    order, ``reach`` the furthest end so far)."""
    index = bisect.bisect_right(starts, at) - 1
    return index >= 0 and at < reach[index]


def _object_number(pdf: bytes, head: int, at: int) -> Page:
    """The number of the object around offset ``at``: that of the nearest
    ``N G obj`` before it, whose ``obj`` is at ``head``."""
    numbered = HEADER.search(pdf, max(0, head - 32), head) if head != -1 else None
    return int(numbered[1]) if numbered else (-1, at)


def _object_stream(pdf: bytes, head: int, at: int, most: int) -> tuple[int, int, int, bytes]:
    """The stream of the object stream whose type is at ``at`` (its ``obj`` at
    ``head``): where it lies in ``pdf``, its ``/First``, and its content
    inflated (to at most ``most`` bytes). Raises ``Unreadable``."""
    keyword = pdf.find(b"stream", at)
    if keyword == -1 or pdf.find(b"endobj", at, keyword) != -1:
        raise Unreadable("no stream")
    if head == -1 or keyword - head > MAX_DICTIONARY:
        raise Unreadable("no object header near it")
    entries = pdf[head:keyword]
    start = keyword + (8 if pdf.startswith(b"\r\n", keyword + 6) else 7)
    length = re.search(rb"/Length\s+(\d+)(?!\s+\d+\s+R)", entries)
    end = start + int(length[1]) if length else pdf.find(b"endstream", start)
    first = re.search(rb"/First\s+(\d+)", entries)
    filters = FILTERS.findall(entries)
    if not start <= end <= len(pdf) or first is None:
        raise Unreadable("no end or no /First")
    if filters not in ([], [b"/FlateDecode"]) or b"/Predictor" in entries:
        raise Unreadable("a filter other than Flate")
    content = pdf[start:end]
    if filters:
        inflating = zlib.decompressobj()
        content = inflating.decompress(content, most)
        if inflating.unconsumed_tail:
            raise Unreadable("it inflates past the bound")
    return start, end, int(first[1]), content


def _pages_in_stream(inflated: bytes, first: int, stream: int) -> set[Page]:
    """The numbers of the pages among an object stream's objects: its header
    pairs each object's number with its offset after ``first``."""
    numbers = [int(n) for n in inflated[:first].split()]
    if len(numbers) % 2:
        raise Unreadable("a broken header")
    pairs = sorted(zip(numbers[1::2], numbers[::2], strict=True))
    offsets = [offset for offset, _ in pairs]
    pages: set[Page] = set()
    for mark in MARKED.finditer(inflated, first):
        if mark[1] == b"Page":
            index = bisect.bisect_right(offsets, mark.start() - first) - 1
            pages.add(pairs[index][1] if index >= 0 else (stream, mark.start()))
    return pages
