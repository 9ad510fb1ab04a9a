"""A bounded scrollback: the last ``capacity`` bytes a process wrote.

Offsets are absolute (bytes ever written), so a reader that remembers where it
stopped can ask for what came after, and learns how much was dropped.
"""

from __future__ import annotations

import anyio

SCROLLBACK_BYTES = 1024 * 1024


class OutputRing:
    def __init__(self, capacity: int = SCROLLBACK_BYTES) -> None:
        self.capacity = capacity
        self._buffer = bytearray()
        self._start = 0
        """Absolute offset of ``_buffer[0]``."""
        self._changed = anyio.Event()
        self.closed = False

    @property
    def end(self) -> int:
        return self._start + len(self._buffer)

    def write(self, data: bytes) -> None:
        self._buffer += data
        excess = len(self._buffer) - self.capacity
        if excess > 0:
            del self._buffer[:excess]
            self._start += excess
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def read(self, offset: int = 0) -> tuple[bytes, int]:
        """(bytes from ``offset`` on, or from the oldest kept byte; the offset they start at)."""
        start = max(offset, self._start)
        return bytes(self._buffer[start - self._start :]), start

    async def wait_beyond(self, offset: int) -> None:
        """Returns once there are bytes past ``offset`` or the ring is closed."""
        while self.end <= offset and not self.closed:
            await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
