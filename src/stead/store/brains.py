"""``BrainStore``: the processes that share a store, as the store sees them.

On PostgreSQL several ``stead serve`` processes run turns from one database.
Each writes a row when it starts and a heartbeat while it runs; a run's
``owner`` is its brain's id. A brain that stopped, or whose heartbeat is stale,
or (seen from its own machine) whose process is gone, is dead: its runs are
re-queued at once instead of when their leases expire. On SQLite the data
directory's lock stands for all this (one process), so no rows are written.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class BrainRecord:
    id: str
    host: str
    machine: str
    """Processes with the same value see each other's pids (same boot, same pid namespace)."""
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None = None


class BrainStore(Protocol):
    async def register_brain(self, brain_id: str, host: str, machine: str, pid: int) -> None:
        """Writes the brain's row, started and alive now. Idempotent."""
        ...

    async def brain_heartbeat(self, brain_id: str) -> bool:
        """Marks the brain alive now; False when it has no live row (it was taken
        for dead, or pruned): the caller registers again."""
        ...

    async def stop_brain(self, brain_id: str) -> None:
        """The brain stops: others may take its runs at once."""
        ...

    async def list_brains(self) -> list[BrainRecord]:
        """Every brain row, newest first."""
        ...

    async def requeue_runs_of_dead_brains(
        self,
        stale_seconds: float,
        machine: str,
        alive: Callable[[int], bool],
        prune_after_seconds: float,
    ) -> list[tuple[str, str]]:
        """Re-queues the runs owned by dead brains (stopped, silent for
        ``stale_seconds``, or on ``machine`` with a pid ``alive`` denies);
        returns (run id, session id) of each. Rows of brains dead for
        ``prune_after_seconds`` are deleted."""
        ...
