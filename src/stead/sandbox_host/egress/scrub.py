"""Hiding a host's secrets in its answers: an origin that echoes what it was sent
must not carry a value into the sandbox, whichever way it spells it.

An echo rarely keeps the value's bytes. A JSON API escapes it in a string, a
redirect percent-encodes it in a URL, a debugging endpoint shows the
``Authorization: Basic`` header it got, or the user and password inside it.
So each value stands for some *cores*:

* the value itself;
* for a value of the form ``<scheme> <credentials>`` (``Bearer t``, ``Basic
  dXNlcjpwdw==``), the credentials; for ``Basic``, also what they decode to
  (``user:password``) and the password alone (what stead itself injects for a
  repository's token: ``Basic base64(x-access-token:<token>)``);

and each core is found in these *forms*:

* as it is, or with any of its characters escaped the way JSON strings (``\\"``,
  ``\\/``, ``\\u00e9`` or ``\\u00E9``, surrogate pairs) or URLs (``%2F`` or
  ``%2f``, ``+`` for a space) escape them, in any mix. Letters, digits, ``-``,
  ``_`` and ``.`` are taken as never escaped: no encoder escapes them, and the
  longest run of them is what is looked for first (``bytes.find``, so an
  answer that holds none is copied at the speed of a plain search);
* base64, standard or URL-safe, at any offset within a longer base64 text:
  the characters that depend on the core alone (so an echo of a whole
  ``Authorization`` header, base64 again, is found too), themselves escaped as
  above.

A derived core (not the value itself) or a base64 form shorter than
``MIN_DERIVED`` bytes is left out: it would match ordinary text. Not covered:
compressed answers (asked for uncompressed and refused otherwise, ``origin.py``),
HTML entities, hex, line-wrapped base64, encodings nested twice.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from dataclasses import dataclass

Headers = list[tuple[bytes, bytes]]

MIN_DERIVED = 8
"""Shortest derived core or base64 form looked for, in bytes."""

NEVER_ESCAPED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")

MIN_ANCHOR = 4
"""A form whose longest run of ``NEVER_ESCAPED`` bytes is shorter is searched for
with its pattern in every answer (a shorter run is in most of them anyway):
such a value (``p/"+&!``, say) costs the proxy a regular expression's pace."""

_SCHEME = re.compile(rb"^([!#$%&'*+.^_`|~0-9A-Za-z-]+) +([!-~]+)$")
_SHORT_ESCAPES = {'"': b'\\"', "\\": b"\\\\", "/": b"\\/", "\b": b"\\b", "\f": b"\\f"} | {
    "\n": b"\\n",
    "\r": b"\\r",
    "\t": b"\\t",
}
_URL_SAFE = bytes.maketrans(b"+/", b"-_")

Spelling = tuple[bytes, bool]
"""One way to write a piece of a core, and whether it is read case-blind (the
hex digits of an escape; kept in lower case)."""


@dataclass(frozen=True, slots=True)
class _Form:
    """One core in one encoding: a pattern, and the same as ``units`` (each a
    choice of spellings, in order) for telling whether an answer ends inside it."""

    pattern: bytes
    units: tuple[tuple[Spelling, ...], ...]
    anchor: bytes
    longest: int
    """The most bytes a match can span."""

    def begins(self, data: bytes, start: int) -> bool:
        """Whether ``data[start:]`` (not empty) is the start of a match, cut short."""
        todo, seen = [(0, start)], set()
        while todo:
            unit, at = todo.pop()
            if at == len(data):
                if unit < len(self.units):
                    return True
                continue
            if unit == len(self.units):
                continue
            for spelling, fold in self.units[unit]:
                piece = data[at : at + len(spelling)]
                if fold:
                    piece = piece.lower()
                if len(piece) < len(spelling):
                    if spelling.startswith(piece):
                        return True
                elif piece == spelling and (unit + 1, at + len(piece)) not in seen:
                    seen.add((unit + 1, at + len(piece)))
                    todo.append((unit + 1, at + len(piece)))
        return False


class ScrubRules:
    """What one set of secret values (``pairs``: value to what the sandbox sees
    instead) looks like in an answer, in the forms above: built once per set of
    credentials (``Secrets`` keeps them), not per request, as a long value makes
    many forms."""

    def __init__(self, pairs: dict[bytes, bytes]) -> None:
        self.count = len(pairs)
        self.shown: list[bytes] = []
        forms: list[_Form] = []
        groups: list[bytes] = []
        for value, shown in sorted(pairs.items(), key=lambda pair: -len(pair[0])):
            found = _forms(value)
            forms += found
            self.shown.append(shown)
            groups.append(b"(" + b"|".join(f.pattern for f in found) + b")")
        self.pattern = re.compile(b"|".join(groups))
        self.names = re.compile(b"|".join(groups), re.IGNORECASE)
        """A header name holding a value: case-blind, as h11 lower-cases names."""
        self.anchors = tuple({f.anchor for f in forms if len(f.anchor) >= MIN_ANCHOR})
        self.everywhere = any(len(f.anchor) < MIN_ANCHOR for f in forms)
        self.by_first: dict[int, list[_Form]] = {}
        for form in forms:
            # A case-blind spelling starts with % or \, never a letter.
            for first in {spelling[0] for spelling, _ in form.units[0]}:
                self.by_first.setdefault(first, []).append(form)
        firsts = b"".join(re.escape(bytes([b])) for b in self.by_first)
        self.starts = re.compile(b"[" + firsts + b"]" if firsts else b"(?!)")
        self.reach = max((f.longest for f in forms), default=0)

    def __repr__(self) -> str:
        return f"ScrubRules({self.count} secrets)"


class Scrubber:
    """Replaces secret values (``rules``) in a response's headers and in its
    body as it streams; holds back only the end of a chunk that could begin a
    form split across two chunks (so a streamed answer, such as server-sent
    events, is not delayed otherwise)."""

    def __init__(self, rules: ScrubRules) -> None:
        self._rules = rules
        self._tail = b""

    def __repr__(self) -> str:
        return f"Scrubber({self._rules.count} secrets)"

    def replace(self, data: bytes) -> bytes:
        rules = self._rules
        if not rules.everywhere and not any(anchor in data for anchor in rules.anchors):
            return data
        return rules.pattern.sub(self._hidden, data)

    def _hidden(self, match: re.Match[bytes]) -> bytes:
        assert match.lastindex is not None
        return self._rules.shown[match.lastindex - 1]

    def headers(self, headers: Headers, *, has_body: bool) -> Headers:
        """``headers`` scrubbed: values replaced, and a header whose name holds a
        value left out (what replaces it is no header name). A body's length
        may change, so it loses its ``Content-Length`` (h11 then frames it
        chunked, or by closing)."""
        framing = (b"content-length", b"transfer-encoding") if has_body else ()
        kept = (h for h in headers if h[0] not in framing and not self._rules.names.search(h[0]))
        return [(name, self.replace(value)) for name, value in kept]

    def feed(self, data: bytes) -> bytes:
        window = self.replace(self._tail + data)
        cut = len(window) - self._partial(window)
        self._tail = window[cut:]
        return window[:cut]

    def _partial(self, window: bytes) -> int:
        """The length of the longest end of ``window`` that begins some form."""
        rules = self._rules
        for start in rules.starts.finditer(window, max(0, len(window) - rules.reach)):
            at = start.start()
            for form in rules.by_first[window[at]]:
                if len(window) - at < form.longest and form.begins(window, at):
                    return len(window) - at
        return 0

    def flush(self) -> bytes:
        data, self._tail = self.replace(self._tail), b""
        return data


def cores(value: bytes) -> list[bytes]:
    """``value`` and the credentials inside it (see the module's docstring)."""
    found = [value]
    scheme = _SCHEME.match(value)
    if scheme is not None:
        credentials = scheme.group(2)
        found.append(credentials)
        if scheme.group(1).lower() == b"basic":
            try:
                decoded = base64.b64decode(credentials, validate=True)
            except (binascii.Error, ValueError):
                decoded = b""
            found += [decoded, decoded.partition(b":")[2]]
    derived = [c for c in found[1:] if len(c) >= MIN_DERIVED]
    return list(dict.fromkeys([value, *derived]))


def fingerprints(core: bytes) -> list[bytes]:
    """The base64 text that ``core`` alone decides, at each of the three offsets it
    can start at within a longer base64 text, standard and URL-safe."""
    found = []
    for offset, skip in ((0, 0), (1, 2), (2, 3)):
        # Characters before ``skip`` hold bits of what precedes the core; the last
        # of a group the core ends inside holds bits of what follows it.
        size = offset + len(core)
        end = size // 3 * 4 + size % 3
        text = base64.b64encode(bytes(offset) + core)[skip:end]
        if len(text) >= MIN_DERIVED:
            found += [text, text.translate(_URL_SAFE)]
    return list(dict.fromkeys(found))


def _forms(value: bytes) -> list[_Form]:
    found = []
    for core in cores(value):
        found.append(_form(core))
        found += [_form(text) for text in fingerprints(core) if text != core]
    return found


def _form(core: bytes) -> _Form:
    units = _units(core)
    pattern = b"".join(_unit_pattern(unit) for unit in units)
    runs = re.findall(rb"[A-Za-z0-9_.-]+", core)
    anchor = max(runs, key=len, default=b"")
    longest = sum(max(len(s) for s, _ in unit) for unit in units)
    return _Form(pattern, units, anchor, longest)


def _units(core: bytes) -> tuple[tuple[Spelling, ...], ...]:
    """Each run of never-escaped bytes as one unit, each other character as one."""
    try:
        chars: Iterable[str | int] = core.decode("utf-8")
    except UnicodeDecodeError:
        chars = core  # not text, so never in JSON: raw or percent-encoded bytes
    units: list[tuple[Spelling, ...]] = []
    run = b""
    for char in chars:
        raw = char.encode() if isinstance(char, str) else bytes([char])
        if len(raw) == 1 and raw[0] in NEVER_ESCAPED:
            run += raw
            continue
        if run:
            units.append(((run, False),))
            run = b""
        units.append(_spellings(char, raw))
    if run:
        units.append(((run, False),))
    return tuple(units)


def _spellings(char: str | int, raw: bytes) -> tuple[Spelling, ...]:
    spellings: list[Spelling] = [(raw, False), ("".join(f"%{b:02x}" for b in raw).encode(), True)]
    if isinstance(char, str):
        if char == " ":
            spellings.append((b"+", False))
        if char in _SHORT_ESCAPES:
            spellings.append((_SHORT_ESCAPES[char], False))
        code = ord(char)
        if code > 0xFFFF:  # a surrogate pair
            code -= 0x10000
            pair = (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))
            spellings.append(("".join(f"\\u{c:04x}" for c in pair).encode(), True))
        else:
            spellings.append((f"\\u{code:04x}".encode(), True))
    return tuple(spellings)


def _unit_pattern(unit: tuple[Spelling, ...]) -> bytes:
    exact = [re.escape(s) for s, fold in unit if not fold]
    blind = [re.escape(s) for s, fold in unit if fold]
    choices = [*exact, *([b"(?i:" + b"|".join(blind) + b")"] if blind else [])]
    return choices[0] if len(choices) == 1 else b"(?:" + b"|".join(choices) + b")"
