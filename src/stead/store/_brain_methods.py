"""``BrainStore`` on the SQL store: each method one transaction of ``_brains.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from stead.store import _brains
from stead.store.brains import BrainRecord

R = TypeVar("R")


class BrainMethods:
    """Mixed into ``SqlStore``, which provides ``_write`` and ``_read``."""

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _sync_clock(self) -> None:
        raise NotImplementedError

    # A brain's row is written on the database's clock, measured again at each
    # beat, as is every time the store writes: brains on machines whose clocks
    # differ must not take each other's heartbeats or leases for stale.
    async def register_brain(self, brain_id: str, host: str, machine: str, pid: int) -> None:
        await self._sync_clock()
        await self._write(_brains.register, brain_id, host, machine, pid)

    async def brain_heartbeat(self, brain_id: str) -> bool:
        await self._sync_clock()
        return await self._write(_brains.heartbeat, brain_id)

    async def stop_brain(self, brain_id: str) -> None:
        await self._write(_brains.stop, brain_id)

    async def list_brains(self) -> list[BrainRecord]:
        return await self._read(_brains.list_)

    async def requeue_runs_of_dead_brains(
        self,
        stale_seconds: float,
        machine: str,
        alive: Callable[[int], bool],
        prune_after_seconds: float,
    ) -> list[tuple[str, str]]:
        return await self._write(
            _brains.requeue_dead, stale_seconds, machine, alive, prune_after_seconds
        )
