"""A bounded scrollback: the last ``capacity`` bytes a process wrote, each
chunk tagged with its channel (1 stdout, 2 stderr, as on the terminal wire).

Offsets are absolute (bytes ever written, all channels together), so a reader
that remembers where it stopped asks for what came after and sees each byte
once, and one that fell behind learns that the oldest bytes were dropped.
"""

from __future__ import annotations

from collections import deque

import anyio

SCROLLBACK_BYTES = 1024 * 1024
STDOUT = 1
STDERR = 2


class OutputRing:
    def __init__(self, capacity: int = SCROLLBACK_BYTES) -> None:
        self.capacity = capacity
        self._chunks: deque[tuple[int, int, bytes]] = deque()
        """(absolute offset, channel, bytes), oldest first."""
        self._size = 0
        self.start = 0
        """Absolute offset of the oldest byte kept."""
        self.end = 0
        self._changed = anyio.Event()
        self.closed = False

    def write(self, data: bytes, channel: int = STDOUT) -> None:
        if not data:
            return
        if len(data) > self.capacity:
            self.start = self.end + len(data) - self.capacity
            self._chunks.clear()
            self._size = 0
            data = data[-self.capacity :]
            self.end = self.start
        self._chunks.append((self.end, channel, data))
        self._size += len(data)
        self.end += len(data)
        while self._size > self.capacity:
            offset, kind, oldest = self._chunks[0]
            excess = self._size - self.capacity
            if len(oldest) <= excess:
                self._chunks.popleft()
                self._size -= len(oldest)
            else:
                self._chunks[0] = (offset + excess, kind, oldest[excess:])
                self._size -= excess
        self.start = self._chunks[0][0] if self._chunks else self.end
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def chunks(self, offset: int = 0) -> list[tuple[int, int, bytes]]:
        """What was written from ``offset`` on (from the oldest kept byte if
        that is later), as (offset, channel, bytes)."""
        found = []
        for start, channel, data in self._chunks:
            if start + len(data) <= offset:
                continue
            skip = max(0, offset - start)
            found.append((start + skip, channel, data[skip:]))
        return found

    def read(self, offset: int = 0) -> tuple[bytes, int]:
        """(bytes of every channel from ``offset`` on, or from the oldest kept
        byte; the offset they start at)."""
        found = self.chunks(offset)
        if not found:
            return b"", min(max(offset, self.start), self.end)
        return b"".join(data for _, _, data in found), found[0][0]

    async def wait_beyond(self, offset: int) -> None:
        """Returns once there are bytes past ``offset`` or the ring is closed."""
        while self.end <= offset and not self.closed:
            await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
