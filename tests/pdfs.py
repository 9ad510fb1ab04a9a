"""Small real PDFs, written by hand for tests: pages of one line of text each,
with a cross-reference table (PDF 1.4) or with the objects in a compressed
object stream and a cross-reference stream (PDF 1.5, as most writers make them
now), optionally saved again incrementally or padded with bytes that are no page.
"""

from __future__ import annotations

import base64
import random
import zlib
from typing import Any

HEADER = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n"


def pdf(
    pages: int, *, object_streams: bool = False, filler: int = 0, saved_again: bool = False
) -> bytes:
    """A PDF of ``pages`` pages. ``filler``: bytes of an incompressible stream
    no page uses (a font or image would weigh as much); ``saved_again``: every
    page rewritten by an incremental update, so the file holds each page twice."""
    objects = _objects(pages, filler)
    written = _with_object_stream(objects) if object_streams else _with_table(objects)
    if saved_again:
        size = max(objects) + (3 if object_streams else 1)
        written = _updated(written, pages, size)
    return written


def pdf_base64(
    pages: int, *, object_streams: bool = False, filler: int = 0, saved_again: bool = False
) -> str:
    """``pdf`` as a base64 source's ``data``."""
    written = pdf(pages, object_streams=object_streams, filler=filler, saved_again=saved_again)
    return base64.standard_b64encode(written).decode("ascii")


def _objects(pages: int, filler: int) -> dict[int, bytes]:
    """Object number -> the object's body (a dict, or a dict and its stream)."""
    font = 3 + 2 * pages
    kids = b" ".join(b"%d 0 R" % (3 + 2 * i) for i in range(pages))
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        font: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for i in range(pages):
        objects[3 + 2 * i] = _page(i, pages)
        text = b"BT /F1 12 Tf 72 720 Td (Page %d of %d) Tj ET" % (i + 1, pages)
        objects[4 + 2 * i] = _stream(b"", text)
    if filler:
        noise = random.Random(filler).randbytes(filler)
        objects[font + 1] = _stream(b"", noise)
    return objects


def _page(index: int, pages: int, extra: bytes = b"") -> bytes:
    font = 3 + 2 * pages
    return (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
        b"/Resources << /Font << /F1 %d 0 R >> >>%s >>" % (4 + 2 * index, font, extra)
    )


def _stream(entries: bytes, data: bytes) -> bytes:
    return b"<< %s/Length %d >>\nstream\n%s\nendstream" % (entries, len(data), data)


def _is_stream(body: bytes) -> bool:
    return b"\nstream\n" in body


def _with_table(objects: dict[int, bytes], start: bytes = HEADER) -> bytes:
    out = bytearray(start)
    offsets = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    size = max(objects) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number]
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def _with_object_stream(objects: dict[int, bytes]) -> bytes:
    """Every object that is no stream in one compressed object stream; the
    cross-reference table a compressed stream of its own."""
    packed = [n for n in sorted(objects) if not _is_stream(objects[n])]
    loose = [n for n in sorted(objects) if _is_stream(objects[n])]
    holder, xref_number = max(objects) + 1, max(objects) + 2
    bodies, pairs, at = [], [], 0
    for number in packed:
        pairs.append(b"%d %d" % (number, at))
        bodies.append(objects[number])
        at += len(objects[number]) + 1
    head = b" ".join(pairs) + b"\n"
    content = zlib.compress(head + b"\n".join(bodies) + b"\n")
    entries = b"/Type /ObjStm /N %d /First %d /Filter /FlateDecode " % (len(packed), len(head))
    out = bytearray(HEADER)
    offsets = {}
    for number in [*loose, holder]:
        offsets[number] = len(out)
        body = objects[number] if number != holder else _stream(entries, content)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    rows = [b"\x00\x00\x00\x00\x00\xff\xff"]
    for number in range(1, xref_number + 1):
        if number in packed:
            index = packed.index(number)
            rows.append(b"\x02" + holder.to_bytes(4, "big") + index.to_bytes(2, "big"))
        else:
            at = offsets.get(number, len(out))  # the cross-reference stream itself
            rows.append(b"\x01" + at.to_bytes(4, "big") + b"\x00\x00")
    table = zlib.compress(b"".join(rows))
    xref = len(out)
    entries = b"/Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Filter /FlateDecode " % (
        xref_number + 1
    )
    out += b"%d 0 obj\n%s\nendobj\n" % (xref_number, _stream(entries, table))
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def _updated(written: bytes, pages: int, size: int) -> bytes:
    """``written`` with an incremental update that rewrites every page (rotated)."""
    previous = int(written.rstrip().split(b"startxref")[-1].split()[0])
    out = bytearray(written)
    offsets = {}
    for i in range(pages):
        number = 3 + 2 * i
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, _page(i, pages, b" /Rotate 90"))
    xref = len(out)
    out += b"xref\n0 1\n0000000000 65535 f \n"
    for number, at in offsets.items():
        out += b"%d 1\n%010d 00000 n \n" % (number, at)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Prev %d >>\n" % (size, previous)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def pdf_message(text: str, data: str) -> dict[str, Any]:
    """A ``user.message`` of ``text`` and the PDF ``data`` (base64) as a document."""
    source = {"type": "base64", "media_type": "application/pdf", "data": data}
    content = [{"type": "text", "text": text}, {"type": "document", "source": source}]
    return {"type": "user.message", "content": content}
