"""``BrainStore`` on the in-memory store: each method one write or read of ``brains.py``."""

from __future__ import annotations

from collections.abc import Callable

from stead.store.brains import BrainRecord
from stead.store.inmemory import brains
from stead.store.inmemory.transactions import Transactions


class BrainMethods(Transactions):
    async def register_brain(self, brain_id: str, host: str, machine: str, pid: int) -> None:
        await self._write(brains.register, brain_id, host, machine, pid)

    async def brain_heartbeat(self, brain_id: str) -> bool:
        return await self._write(brains.heartbeat, brain_id)

    async def stop_brain(self, brain_id: str) -> None:
        await self._write(brains.stop, brain_id)

    async def list_brains(self) -> list[BrainRecord]:
        return await self._read(brains.list_)

    async def requeue_runs_of_dead_brains(
        self,
        stale_seconds: float,
        machine: str,
        alive: Callable[[int], bool],
        prune_after_seconds: float,
    ) -> list[tuple[str, str]]:
        return await self._write(
            brains.requeue_dead, stale_seconds, machine, alive, prune_after_seconds
        )
