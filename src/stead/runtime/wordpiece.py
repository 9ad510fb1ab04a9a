"""BERT's uncased WordPiece tokenizer, for the embedding model (``minilm.py``).

The rules of ``BertTokenizer`` with ``do_lower_case``: drop control characters,
space out CJK ideographs, lowercase and strip accents, split off punctuation,
then split each word greedily into the longest pieces the vocabulary has
(``##`` marks a piece inside a word); a word that cannot be split is ``[UNK]``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

MAX_WORD_CHARS = 100
CHUNK_CHARS = 2048
"""Text is tokenized this many characters (to the next space) at a time, until
enough tokens are found: a long text costs only its start, however it is spaced."""
_SPACE = re.compile(r"\s")


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk(code: int) -> bool:
    return (
        0x4E00 <= code <= 0x9FFF
        or 0x3400 <= code <= 0x4DBF
        or 0x20000 <= code <= 0x2A6DF
        or 0x2A700 <= code <= 0x2B81F
        or 0x2B820 <= code <= 0x2CEAF
        or 0xF900 <= code <= 0xFAFF
        or 0x2F800 <= code <= 0x2FA1F
    )


def _words(text: str) -> list[str]:
    cleaned = []
    for char in text:
        code = ord(char)
        category = unicodedata.category(char)
        if code in (0, 0xFFFD) or (category.startswith("C") and char not in "\t\n\r"):
            continue
        if char.isspace():
            cleaned.append(" ")
        elif _is_cjk(code):
            cleaned.append(f" {char} ")
        else:
            cleaned.append(char)
    stripped = unicodedata.normalize("NFD", "".join(cleaned).lower())
    plain = "".join(c for c in stripped if unicodedata.category(c) != "Mn")
    words: list[str] = []
    for token in plain.split():
        current = ""
        for char in token:
            if _is_punctuation(char):
                if current:
                    words.append(current)
                words.append(char)
                current = ""
            else:
                current += char
        if current:
            words.append(current)
    return words


class WordPiece:
    def __init__(self, vocab_file: Path) -> None:
        lines = vocab_file.read_text(encoding="utf-8").splitlines()
        self.ids = {token: index for index, token in enumerate(lines)}
        self.unknown = self.ids["[UNK]"]
        self.first = self.ids["[CLS]"]
        self.last = self.ids["[SEP]"]

    def encode(self, text: str, max_tokens: int) -> list[int]:
        """``[CLS]`` + the pieces of ``text`` + ``[SEP]``, cut to ``max_tokens``."""
        pieces: list[int] = []
        room = max_tokens - 2
        for chunk in _chunks(text):
            for word in _words(chunk):
                pieces.extend(self._pieces(word))
                if len(pieces) >= room:
                    return [self.first, *pieces[:room], self.last]
        return [self.first, *pieces, self.last]

    def _pieces(self, word: str) -> list[int]:
        if len(word) > MAX_WORD_CHARS:
            return [self.unknown]
        found: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    found.append(self.ids[piece])
                    break
                end -= 1
            if end == start:
                return [self.unknown]
            start = end
        return found


def _chunks(text: str) -> Iterator[str]:
    """``text`` in pieces of about ``CHUNK_CHARS``, each cut at a space, so no word
    is split (and no accent parted from its letter: a space is never combined)."""
    start = 0
    while start < len(text):
        end = start + CHUNK_CHARS
        if end < len(text):
            space = _SPACE.search(text, end)
            end = len(text) if space is None else space.start()
        yield text[start:end]
        start = end
