"""Server-sent events read from an upstream's body, as the SSE specification
frames them: a blank line ends an event, ``event:`` names its type
("message" by default), its ``data:`` lines are joined by newlines, comments
and other fields are skipped, and CR, LF or CRLF ends a line. An event without
data is not one. Chunks may split anything anywhere."""

from __future__ import annotations


class SseDecoder:
    def __init__(self, max_event_bytes: int) -> None:
        self._buffer = bytearray()
        self._max = max_event_bytes
        self._scanned = 0
        """How much of the buffer holds no event's end (searched already)."""
        self._cr = False
        """The last chunk ended in CR (taken as the line's end): an LF starting
        the next one belongs to it."""

    def feed(self, chunk: bytes) -> list[tuple[str, bytes]]:
        """The events ``chunk`` completes, as (type, data); ``ValueError`` for an
        event larger than the bound."""
        if not chunk:
            return []
        if self._cr and chunk[:1] == b"\n":
            chunk = chunk[1:]  # the LF of a CRLF the last chunk ended in the middle of
        self._cr = chunk[-1:] == b"\r"
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self._buffer
        buffer += chunk
        events: list[tuple[str, bytes]] = []
        start = 0
        search = max(0, self._scanned - 1)
        while (end := buffer.find(b"\n\n", search)) != -1:
            event = _event(bytes(buffer[start:end]))
            if event is not None:
                events.append(event)
            start = search = end + 2
        if start:
            del buffer[:start]
        self._scanned = len(buffer)
        if self._scanned > self._max:
            raise ValueError(f"an event over {self._max} bytes")
        return events


def _event(block: bytes) -> tuple[str, bytes] | None:
    kind = "message"
    data: bytes | None = None
    for line in block.split(b"\n"):
        if not line or line[:1] == b":":
            continue
        name, _, value = line.partition(b":")
        if value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            data = value if data is None else data + b"\n" + value
        elif name == b"event":
            kind = value.decode("utf-8", "replace")
    return None if data is None else (kind, data)
