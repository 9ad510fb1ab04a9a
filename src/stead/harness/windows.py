"""How many tokens a model's context window holds, and how full a request is.

The count of a request is an estimate made from the request alone (about four
characters a token; a fixed size for each image or PDF), so the same log gives
the same count in every process. The model's own count of the last request it
answered, or refused as longer than its window, which the log records, takes
over when it is larger (``compaction.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

CLAUDE_WINDOW = 200_000
"""Every current Claude model's window without a long-context beta (stead
sends none)."""
OPENAI_COMPATIBLE_WINDOW = 128_000
"""A model an OpenAI-compatible server answers, unless configured."""
CHARS_PER_TOKEN = 4
MEDIA_TOKENS = 1_600
"""An image or a document sent as bytes: about what a full-size image costs."""


def context_window(
    model: str, configured: Mapping[str, int], openai_models: Iterable[str] = ()
) -> int:
    """``configured`` (``STEAD_CONTEXT_WINDOWS``) first, then the defaults."""
    if model in configured:
        return configured[model]
    if model in set(openai_models):
        return OPENAI_COMPATIBLE_WINDOW
    return CLAUDE_WINDOW


def estimate_tokens(value: Any) -> int:
    """Estimated tokens of a request's JSON (or any part of it)."""
    return _chars(value) // CHARS_PER_TOKEN


MEDIA_MARK = '"type":"base64"'
"""How a media source's mapping shows in canonical JSON (sorted keys, no spaces)."""


def tokens_at_most(canonical_json: str) -> int:
    """At least ``estimate_tokens`` of the value whose ``jsonvalues.canonical`` form
    this is, without walking the value: its JSON holds every key and text at
    least as long as it is counted (quotes, escapes and punctuation only add),
    and each media source once, which is counted at its fixed size whatever its
    bytes. A long session's request is megabytes of nodes to walk; this is a
    length and one scan of the text, which is made for the op key anyway."""
    media = canonical_json.count(MEDIA_MARK)
    return (len(canonical_json) + media * MEDIA_TOKENS * CHARS_PER_TOKEN) // CHARS_PER_TOKEN


def _chars(value: Any) -> int:
    """Characters of every key and value under ``value``; a media source counts
    ``MEDIA_TOKENS`` whatever its bytes. A loop over a stack, not recursion: this
    walks the whole request at every model step (thousands of nodes in a long
    session), and a call and a generator per node cost twice the counting."""
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
            total += _mapping_chars(item, pending)
        elif kind is list:
            pending.extend(item)
        elif isinstance(item, str):
            total += len(item)
        elif isinstance(item, Mapping):
            total += _mapping_chars(item, pending)
        elif isinstance(item, list | tuple):
            pending.extend(item)
        else:
            total += len(str(item))
    return total


def _mapping_chars(value: Mapping[Any, Any], pending: list[Any]) -> int:
    """The characters of ``value``'s keys (its values go on ``pending``), or a
    media source's fixed size."""
    if value.get("type") == "base64" and "data" in value:
        return MEDIA_TOKENS * CHARS_PER_TOKEN
    keys = 0
    for key, item in value.items():
        keys += len(key) if type(key) is str else len(str(key))
        pending.append(item)
    return keys
