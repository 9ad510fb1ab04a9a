"""What the sandbox host counts for the brain's ``/metrics``: how long wakes and
snapshots take, and its sandboxes' egress requests by decision.

Cumulative since the host started, and sent in its ``ping`` answer, so a brain
renders them as Prometheus histograms and counters at scrape time (a host
restart starts them again from zero, as a process's own counters do).
"""

from __future__ import annotations

import bisect
import contextlib
import time
from collections.abc import Iterator
from typing import Any

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Upper bounds in seconds: a warm wake takes milliseconds, a snapshot of a large
workspace tens of seconds."""
TIMED = ("wake", "snapshot")


class Durations:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        """Observations per bucket (not cumulative); the last is above every bound."""
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds


class HostMetrics:
    def __init__(self) -> None:
        self._durations = {name: Durations() for name in TIMED}
        self._egress = {"allowed": 0, "denied": 0}

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Observes how long the block takes when it finishes without an error."""
        start = time.monotonic()
        yield
        self._durations[name].observe(time.monotonic() - start)

    def egress(self, allowed: bool) -> None:
        self._egress["allowed" if allowed else "denied"] += 1

    def as_json(self) -> dict[str, Any]:
        return {
            "buckets": list(BUCKETS),
            "durations": {
                name: {"counts": list(found.counts), "sum": found.total}
                for name, found in self._durations.items()
            },
            "egress_requests": dict(self._egress),
        }
