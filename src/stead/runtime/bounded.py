"""``Bounded``: a least-recently-used map bounded by its entries, by a count
they carry (a log's events) and by their weight in memory.

The caches of something per session use it (``LogCache``, ``Renderings``,
``PlannedRequests``, the MCP tool lists). A bound on entries alone does not
bound memory: one event may be a five-megabyte image, one tool list hundreds
of kilobytes. Weights are what the caller says (``jsonvalues.weight``, a
text's length); a map of values all alike (a file's digest) is bounded by its
entries alone. While any bound is passed the least recently put or used
entries go; the entry put last always stays, however heavy. Not thread-safe:
a cache used from two threads holds its own lock around it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class _Entry(Generic[V]):
    value: V
    weight: int
    count: int


class Bounded(Generic[K, V]):
    def __init__(
        self, most: int, max_bytes: int | None = None, max_count: int | None = None
    ) -> None:
        self._most = most
        self._max_bytes = max_bytes
        self._max_count = max_count
        self._entries: OrderedDict[K, _Entry[V]] = OrderedDict()
        self._bytes = 0
        self._count = 0

    def get(self, key: K) -> V | None:
        """The value held for ``key``; reading does not make it recent (``use``)."""
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def use(self, key: K) -> V | None:
        """The value held for ``key``, made the most recently used."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        return entry.value

    def weight(self, key: K) -> int:
        """What the entry for ``key`` weighs (0: none is held)."""
        entry = self._entries.get(key)
        return 0 if entry is None else entry.weight

    def put(self, key: K, value: V, weight: int = 0, count: int = 1) -> None:
        """Holds ``value`` for ``key`` (in place of any before it), as the most
        recent entry; then drops the oldest while a bound is passed."""
        self.pop(key)
        self._entries[key] = _Entry(value, weight, count)
        self._bytes += weight
        self._count += count
        while len(self._entries) > 1 and self._over():
            _, dropped = self._entries.popitem(last=False)
            self._forget(dropped)

    def pop(self, key: K) -> V | None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self._forget(entry)
        return entry.value

    def keys(self) -> list[K]:
        """The keys held, least recently used first."""
        return list(self._entries)

    def _over(self) -> bool:
        return (
            len(self._entries) > self._most
            or (self._max_bytes is not None and self._bytes > self._max_bytes)
            or (self._max_count is not None and self._count > self._max_count)
        )

    def _forget(self, entry: _Entry[V]) -> None:
        self._bytes -= entry.weight
        self._count -= entry.count
