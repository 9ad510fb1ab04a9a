"""The members of a tar stream as ``archive.write_archive`` writes it, read
sequentially: 512-byte ustar headers, each optionally preceded by a PAX
extended header (``x``) with the exact mtime or a long or non-ASCII name.

Why not ``tarfile``: restoring a workspace of many small files spent most of
its time in ``tarfile``'s general header parsing, and a wake waits for it.
This reader parses only what a snapshot holds and refuses the rest (global
PAX headers, GNU long names, base-256 numbers), so it is also the stricter
of the two. Member data is read in place from the stream; what a caller does
not read is skipped before the next header.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

BLOCK = 512
REGULAR = b"0"
OLD_REGULAR = b"\0"
HARD_LINK = b"1"
SYMLINK = b"2"
CHAR_DEVICE = b"3"
BLOCK_DEVICE = b"4"
DIRECTORY = b"5"
FIFO = b"6"
PAX_HEADER = b"x"
MAX_PAX_BYTES = 1 << 20
"""A PAX header holds a name and an mtime; more than this is not a snapshot's."""
_ZERO_BLOCK = bytes(BLOCK)
_SKIP_CHUNK = 1 << 20
READ_BYTES = 256 * 1024


class TarFormatError(Exception):
    """The stream is not a tar archive this reader accepts; says where."""


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Member:
    name: str
    """As archived, without a directory's trailing slash."""
    type: bytes
    mode: int
    size: int
    mtime_ns: int
    linkname: str = ""

    @property
    def is_file(self) -> bool:
        return self.type in (REGULAR, OLD_REGULAR)

    @property
    def is_dir(self) -> bool:
        return self.type == DIRECTORY

    @property
    def is_symlink(self) -> bool:
        return self.type == SYMLINK


class TarStream:
    """``members()`` yields each member; while one is current, ``read`` returns
    its data (at most ``size`` bytes in all)."""

    def __init__(self, stream: Readable) -> None:
        self._stream = stream
        self._buffer = b""
        self._position = 0
        self._data_left = 0
        self._padding = 0

    def members(self) -> Iterator[Member]:
        extended: dict[str, str] | None = None
        while True:
            self._skip_rest()
            block = self._read_exact(BLOCK, "a header", allow_eof=extended is None)
            if block is None or block == _ZERO_BLOCK:
                if extended is not None:
                    raise TarFormatError("the archive ends after an extended header")
                return
            header = _parse_header(block)
            kind = header.type
            if kind == PAX_HEADER:
                if extended is not None:
                    raise TarFormatError("two extended headers in a row")
                if header.size > MAX_PAX_BYTES:
                    raise TarFormatError(f"an extended header of {header.size} bytes")
                records = self._read_exact(header.size, "an extended header")
                self._skip_padding(header.size)
                extended = _parse_pax(records or b"")
                continue
            member = _apply_pax(header, extended or {})
            extended = None
            self._data_left = member.size if member.is_file else 0
            self._padding = -member.size % BLOCK if member.is_file else 0
            yield member

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the current member's data; b"" at its end."""
        size = min(size, self._data_left)
        if size <= 0:
            return b""
        data = self._take(size)
        if not data:
            raise TarFormatError("the archive ends inside a file's data")
        self._data_left -= len(data)
        return data

    def _take(self, size: int) -> bytes:
        """Up to ``size`` bytes from the stream, b"" at its end. Headers are
        served from a buffer: one read of the decompressor per header would
        cost more than parsing it."""
        if self._position >= len(self._buffer):
            if size >= READ_BYTES:
                return self._stream.read(size)
            self._buffer = self._stream.read(READ_BYTES)
            self._position = 0
        start = self._position
        self._position = min(start + size, len(self._buffer))
        return self._buffer[start : self._position]

    def _skip_rest(self) -> None:
        while self._data_left:
            self.read(min(self._data_left, _SKIP_CHUNK))
        if self._padding:
            self._read_exact(self._padding, "a file's padding")
            self._padding = 0

    def _skip_padding(self, size: int) -> None:
        if padding := -size % BLOCK:
            self._read_exact(padding, "an extended header's padding")

    def _read_exact(self, size: int, what: str, *, allow_eof: bool = False) -> bytes | None:
        parts: list[bytes] = []
        left = size
        while left:
            data = self._take(left)
            if not data:
                if allow_eof and left == size:
                    return None
                raise TarFormatError(f"the archive ends inside {what}")
            parts.append(data)
            left -= len(data)
        return b"".join(parts)


def _parse_header(block: bytes) -> Member:
    stored = _number(block[148:156], "checksum")
    # The checksum counts its own field as eight spaces.
    if sum(block) - sum(block[148:156]) + 8 * 0x20 != stored:
        raise TarFormatError("a header's checksum does not match")
    if block[257:265] != b"ustar\x0000":
        raise TarFormatError("a header that is not POSIX ustar")
    name = _text(block[0:100])
    prefix = _text(block[345:500])
    if prefix:
        name = f"{prefix}/{name}"
    return Member(
        name=name,
        type=block[156:157],
        mode=_number(block[100:108], "mode"),
        size=_number(block[124:136], "size"),
        mtime_ns=_number(block[136:148], "mtime") * 1_000_000_000,
        linkname=_text(block[157:257]),
    )


def _apply_pax(header: Member, extended: dict[str, str]) -> Member:
    name = extended.get("path", header.name)
    size = header.size
    if "size" in extended:
        size = _decimal(extended["size"], "size")
    mtime_ns = header.mtime_ns
    if "mtime" in extended:
        mtime_ns = _mtime_ns(extended["mtime"])
    kind = header.type
    if kind == DIRECTORY:
        name = name.rstrip("/") or "/"
    return Member(
        name=name,
        type=kind,
        mode=header.mode,
        size=size,
        mtime_ns=mtime_ns,
        linkname=extended.get("linkpath", header.linkname),
    )


def _parse_pax(records: bytes) -> dict[str, str]:
    """``"LEN key=value\\n"`` records, LEN counting the whole record."""
    values: dict[str, str] = {}
    position = 0
    while position < len(records):
        if records[position] == 0:  # trailing NULs pad some writers' records
            break
        space = records.find(b" ", position)
        if space < 0:
            raise TarFormatError("an extended header record without a length")
        length = _decimal(records[position:space].decode("ascii", "replace"), "record length")
        end = position + length
        if length <= space - position or end > len(records) or records[end - 1] != 0x0A:
            raise TarFormatError("an extended header record of the wrong length")
        key, equals, value = records[space + 1 : end - 1].partition(b"=")
        if not equals:
            raise TarFormatError("an extended header record without '='")
        values[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        position = end
    return values


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _number(field: bytes, what: str) -> int:
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if digits.translate(None, b"01234567"):  # int() would take signs and "_"
        raise TarFormatError(f"a header's {what} is not an octal number")
    return int(digits, 8) if digits else 0


def _decimal(text: str, what: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise TarFormatError(f"an extended header's {what} is not a number: {text[:40]!r}")
    return int(text)


def _mtime_ns(text: str) -> int:
    """A PAX mtime (decimal seconds, maybe negative, maybe fractional) in ns."""
    negative = text.startswith("-")
    whole, _, fraction = text.removeprefix("-").partition(".")
    if not (whole.isascii() and whole.isdigit()) or (
        fraction and not (fraction.isascii() and fraction.isdigit())
    ):
        raise TarFormatError(f"an extended header's mtime is not a number: {text[:40]!r}")
    nanos = int(whole) * 1_000_000_000 + int(fraction[:9].ljust(9, "0"))
    return -nanos if negative else nanos
