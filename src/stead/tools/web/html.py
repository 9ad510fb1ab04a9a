"""HTML -> readable text for the model, with the standard library's parser.

Script, style and other non-text elements are dropped; headings become ``#``
lines, list items ``-`` lines, paragraphs and other blocks are separated by
blank lines, ``<pre>`` keeps its whitespace, and links keep their target as an
absolute URL (``[text](url)``), so the model can fetch them next.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

_SKIPPED = frozenset(
    {"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "select"}
)
_BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "dd", "details", "dialog", "div", "dl",
        "dt", "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "main",
        "nav", "ol", "p", "section", "summary", "table", "tbody", "thead", "tfoot", "tr", "ul",
    }
)  # fmt: skip
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_VOID = frozenset({"br", "hr", "img", "input", "meta", "link", "base", "wbr", "source", "col"})
_SPACES = re.compile(r"\s+")
_BLANK_LINES = re.compile(r"\n{3,}")


def html_to_text(html: str, url: str) -> tuple[str | None, str]:
    """(the page's title, its text); links are resolved against ``url``."""
    parser = _TextMaker(url)
    parser.feed(html)
    parser.close()
    return parser.title, parser.text()


class _TextMaker(HTMLParser):
    def __init__(self, url: str) -> None:
        super().__init__(convert_charrefs=True)
        self._base = url
        self._parts: list[str] = []
        self._newlines = 0
        """Newlines the text ends with (so far, over all parts)."""
        self._spaced = True
        """Whether the text ends with a space or a newline (or is empty)."""
        self._skipping: list[str] = []
        self._pre = 0
        self._links: list[tuple[int, str | None]] = []
        self._title: list[str] | None = None
        self.title: str | None = None

    def parse_html_declaration(self, i: int) -> int:
        """``<!...>``; one the standard library cannot parse (a marked section
        with a keyword it does not know, ``<![foo[``, raises AssertionError) is
        skipped to its ``>`` as a bogus comment, as browsers do."""
        try:
            return super().parse_html_declaration(i)
        except AssertionError:
            return self.parse_bogus_comment(i)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping:
            if tag in _SKIPPED:
                self._skipping.append(tag)
            return
        if tag in _SKIPPED:
            self._skipping.append(tag)
        elif tag == "title" and self.title is None:
            self._title = []
        elif tag == "base":
            href = dict(attrs).get("href")
            if href and _link(self._base, href) is not None:
                self._base = urljoin(self._base, href.strip())
        elif tag == "a":
            self._links.append((len(self._parts), _link(self._base, dict(attrs).get("href"))))
        else:
            self._open(tag)

    def _open(self, tag: str) -> None:
        if tag in _HEADINGS:
            self._break(2)
            self._add("#" * _HEADINGS[tag] + " ")
        elif tag == "li":
            self._break(1)
            self._add("- ")
        elif tag == "br":
            self._add("\n")
        elif tag in ("td", "th"):
            self._add(" ")
        elif tag == "pre":
            self._break(2)
            self._pre += 1
        elif tag in _BLOCKS:
            self._break(2)

    def handle_endtag(self, tag: str) -> None:
        if self._skipping:
            if tag in self._skipping:
                # Sloppy HTML closes an outer element without its inner ones.
                del self._skipping[self._skipping.index(tag) :]
            return
        if tag == "title" and self._title is not None:
            self.title = _SPACES.sub(" ", "".join(self._title)).strip() or None
            self._title = None
        elif tag == "a" and self._links:
            self._close_link(*self._links.pop())
        elif tag == "pre" and self._pre:
            self._pre -= 1
            self._break(2)
        elif tag in _HEADINGS or tag in _BLOCKS:
            self._break(2)
        elif tag == "li":
            self._break(1)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        if self._title is not None:
            self._title.append(data)
            return
        if self._pre:
            self._add(data)
            return
        text = _SPACES.sub(" ", data)
        if self._after_space():
            text = text.lstrip()
        if text:
            self._add(text)

    def _close_link(self, start: int, url: str | None) -> None:
        if url is None:
            return
        label = _SPACES.sub(" ", "".join(self._parts[start:])).strip()
        del self._parts[start:]
        # The state the deleted parts left is stale, but what replaces them is
        # text (a URL at least), which sets it whole.
        self._add(f"[{label}]({url})" if label and label != url else url)

    def _add(self, text: str) -> None:
        """Appends ``text`` and keeps the end's state, so nothing rescans the
        parts (a page of many empty blocks made every break a walk over all of
        them: seconds of the event loop for a 100 KB page)."""
        if text:
            self._parts.append(text)
            self._track(text)

    def _track(self, text: str) -> None:
        stripped = text.rstrip("\n")
        self._newlines = len(text) - len(stripped) + (0 if stripped else self._newlines)
        self._spaced = text.endswith(("\n", " "))

    def _after_space(self) -> bool:
        return self._spaced

    def _break(self, lines: int) -> None:
        """Ends the line and leaves ``lines - 1`` blank ones, unless already so."""
        if self._parts:
            self._add("\n" * max(0, lines - self._newlines))

    def text(self) -> str:
        lines = "".join(self._parts).split("\n")
        joined = "\n".join(line.rstrip() for line in lines)
        return _BLANK_LINES.sub("\n\n", joined).strip()


def _link(base: str, href: str | None) -> str | None:
    """The absolute http(s) URL a link points to; None for anything else
    (``javascript:``, ``mailto:``, a fragment of this page)."""
    if not href or href.startswith("#"):
        return None
    try:  # a malformed host (``http://[::1``) is a ValueError
        url = urljoin(base, href.strip())
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a port out of range)
    except ValueError:
        return None
    return url if parts.scheme in ("http", "https") else None
