"""A fetched body -> what the model sees: HTML as readable text, other text
as it is, a PDF as a document block; anything else is refused.

Text is cut at ``max_content_tokens`` (the tool config's, or
``DEFAULT_MAX_CONTENT_TOKENS``), estimated as ``CHARS_PER_TOKEN`` characters a
token; the cut is always said. PDFs are not cut: one cut short by the byte
limit is refused instead.
"""

from __future__ import annotations

import base64
import codecs
import re

from stead.jsonvalues import Json
from stead.tools.outcome import ToolOutcome
from stead.tools.web.errors import WebError
from stead.tools.web.fetch import Fetched
from stead.tools.web.html import html_to_text

DEFAULT_MAX_CONTENT_TOKENS = 25_000
CHARS_PER_TOKEN = 4
"""A rough estimate of English text; the cut errs on the long side for code."""
_HTML = frozenset({"text/html", "application/xhtml+xml"})
_TEXT = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/x-sh",
        "application/sql",
        "application/rss+xml",
        "application/atom+xml",
    }
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def page_outcome(fetched: Fetched, max_content_tokens: int | None) -> ToolOutcome:
    """Raises ``WebError`` for a body web_fetch cannot give the model."""
    kind = _kind(fetched)
    if kind == "pdf":
        return _pdf(fetched)
    text = _decode(fetched, kind == "html")
    title = None
    if kind == "html":
        title, text = html_to_text(text, fetched.url)
    return ToolOutcome.text(_render(fetched, title, text, max_content_tokens))


def _kind(fetched: Fetched) -> str:
    media = fetched.content_type
    if media in _HTML:
        return "html"
    if media == "application/pdf":
        return "pdf"
    if media.startswith("text/") or media in _TEXT or media.endswith(("+json", "+xml")):
        return "text"
    if media in ("", "application/octet-stream"):
        return _sniff(fetched.body)
    raise WebError(
        f"{fetched.url} is {media}, which web_fetch cannot read (it reads HTML, text and PDF)"
    )


def _sniff(body: bytes) -> str:
    """The kind of a body sent without a telling type: PDF, HTML or text, if it is one."""
    if body.startswith(b"%PDF-"):
        return "pdf"
    if b"\x00" not in body[:4096]:
        head = body[:1024].lstrip().lower()
        return "html" if head.startswith((b"<!doctype html", b"<html")) else "text"
    raise WebError(
        "the answer is binary data of no stated type; web_fetch reads HTML, text and PDF"
    )


def _decode(fetched: Fetched, html: bool) -> str:
    charset = fetched.charset
    if charset is None and html:
        found = _META_CHARSET.search(fetched.body[:4096])
        charset = found.group(1).decode("ascii") if found else None
    try:
        codec = codecs.lookup(charset or "utf-8").name
    except LookupError:
        codec = "utf-8"
    if codec == "utf-8":
        codec = "utf-8-sig"  # drops a byte order mark
    try:
        return fetched.body.decode(codec, errors="replace")
    except (LookupError, UnicodeError):
        # A charset the page names may be any codec Python knows: decode refuses
        # the ones that are not text encodings (base64, zlib), and idna errors=replace.
        return fetched.body.decode("utf-8-sig", errors="replace")


def _pdf(fetched: Fetched) -> ToolOutcome:
    if fetched.truncated:
        raise WebError(
            f"{fetched.url}: a PDF over {len(fetched.body)} bytes, the most web_fetch reads"
        )
    source = {
        "type": "base64",
        "media_type": "application/pdf",
        "data": base64.standard_b64encode(fetched.body).decode("ascii"),
    }
    document: Json = {"type": "document", "source": source}
    return ToolOutcome([{"type": "text", "text": _header(fetched, None)}, document])


def _render(fetched: Fetched, title: str | None, text: str, max_tokens: int | None) -> str:
    tokens = max_tokens if max_tokens is not None and max_tokens > 0 else DEFAULT_MAX_CONTENT_TOKENS
    limit = tokens * CHARS_PER_TOKEN
    text = text.rstrip()
    parts = [_header(fetched, title), "", text or "(no text)"]
    if len(text) > limit:
        parts[2] = text[:limit]
        parts.append(
            f"\n[content cut at about {tokens} tokens ({limit} of {len(text)} characters)]"
        )
    if fetched.truncated:
        parts.append(
            f"\n[the body is longer than {len(fetched.body)} bytes; only that much was read]"
        )
    return "\n".join(parts)


def _header(fetched: Fetched, title: str | None) -> str:
    lines = [f"URL: {fetched.url}"]
    if fetched.url != fetched.requested:
        lines.append(f"Redirected from: {fetched.requested}")
    if title:
        lines.append(f"Title: {title}")
    lines.append(f"Content-Type: {fetched.content_type or 'unknown'}")
    return "\n".join(lines)
