"""The purger both blob keepers (``FileKeeper``, ``MemoryKeeper``) run: blobs
named by rows that let them go are removed in batches, every ``interval``.

A row names its blob before the blob is written, so a writer that dies leaves a
pending row; once it is older than ``grace`` the purger takes it as abandoned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

import anyio
from anyio.abc import TaskStatus

from stead.runtime.clock import Clock, SystemClock
from stead.runtime.rounds import survived

T = TypeVar("T")
PURGE_BATCH = 100


@dataclass(frozen=True)
class PurgeTerms:
    interval: float
    """Seconds between rounds."""
    grace: timedelta
    """How long a pending write may take before it counts as abandoned."""
    clock: Clock

    @classmethod
    def of(cls, purge_interval: float, upload_grace: float, clock: Clock | None) -> PurgeTerms:
        if purge_interval <= 0 or upload_grace <= 0:
            raise ValueError("purge_interval and upload_grace must be > 0")
        return cls(purge_interval, timedelta(seconds=upload_grace), clock or SystemClock())


async def purge_in_batches(
    terms: PurgeTerms,
    batch: Callable[[datetime, int], Awaitable[Sequence[T]]],
    remove: Callable[[T], Awaitable[bool]],
) -> int:
    """Removes what ``batch(pending_before, limit)`` names until a batch is short
    or nothing in it could be removed (the blob store is failing: next round).
    Returns how many went."""
    removed = 0
    while True:
        found = await batch(terms.clock.now() - terms.grace, PURGE_BATCH)
        done = [await remove(item) for item in found]
        removed += sum(done)
        if len(found) < PURGE_BATCH or not any(done):
            return removed


async def purge_every(
    terms: PurgeTerms,
    purge: Callable[[], Awaitable[int]],
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Runs ``purge`` every ``terms.interval`` until cancelled, the first round at
    once (what a previous process left). A round that fails is skipped (``rounds``)."""
    task_status.started()
    while True:
        await survived("purge", purge)
        await terms.clock.sleep(terms.interval)
