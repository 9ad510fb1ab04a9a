"""The audit log of one sandbox's egress: one entry per request that reached the
proxy (forwarded, refused or failed), held in the host's memory.

An entry names the host, method, status, bytes each way and the ids of the
credentials injected, never a value or a path (a URL may carry a secret of the
sandbox's own). The log is a bounded ring: ``seq`` numbers keep counting, so a
reader pages with ``after`` and sees how many entries it missed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

AUDIT_ENTRIES = 2000
"""Default number of entries one sandbox's log keeps."""


@dataclass(slots=True)
class AuditEntry:
    """One request: filled in by the proxy as it goes, numbered when logged."""

    host: str
    port: int
    method: str = ""
    """``CONNECT`` for a tunnel whose content the proxy did not read."""
    status: int = 0
    """The status the client got; 0 when none was sent (the client left)."""
    bytes_out: int = 0
    """Bytes sent to the origin (head and body, as sent)."""
    bytes_in: int = 0
    """Bytes sent back to the sandbox."""
    credential_ids: tuple[str, ...] = ()
    error: str = ""
    """Why the proxy refused or failed the request; empty when it was forwarded."""
    seq: int = 0
    time: float = 0.0
    """Seconds since the epoch when the request ended."""


Exchange = AuditEntry
"""An entry while its request is in progress."""


class AuditLog:
    def __init__(
        self, *, size: int = AUDIT_ENTRIES, clock: Callable[[], float] = time.time
    ) -> None:
        self._entries: deque[AuditEntry] = deque(maxlen=size)
        self._next = 1
        self._clock = clock

    @property
    def last_seq(self) -> int:
        return self._next - 1

    def record(self, entry: AuditEntry) -> None:
        """Logs ``entry``, which its writer no longer changes."""
        entry.seq, entry.time = self._next, self._clock()
        self._entries.append(entry)
        self._next += 1

    def read(self, after: int = 0, limit: int = 100) -> list[AuditEntry]:
        """Up to ``limit`` entries with ``seq > after``, oldest first."""
        return [e for e in self._entries if e.seq > after][:limit]
