"""The brains of a shared store in memory (``_brains.py``'s rules: which brains
are dead and which rows of them go are its functions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from stead.store._brains import dead_brains, prunable
from stead.store._runs import OWNED
from stead.store.brains import BrainRecord
from stead.store.inmemory.tables import Tables
from stead.store.runs import RunStatus


def register(t: Tables, now: datetime, brain_id: str, host: str, machine: str, pid: int) -> None:
    t.brains[brain_id] = BrainRecord(brain_id, host, machine, pid, now, now)


def heartbeat(t: Tables, now: datetime, brain_id: str) -> bool:
    found = t.brains.get(brain_id)
    if found is None or found.stopped_at is not None:
        return False
    t.brains[brain_id] = replace(found, heartbeat_at=now)
    return True


def stop(t: Tables, now: datetime, brain_id: str) -> None:
    found = t.brains.get(brain_id)
    if found is not None:
        t.brains[brain_id] = replace(found, stopped_at=now)


def list_(t: Tables) -> list[BrainRecord]:
    by_id = sorted(t.brains.values(), key=lambda b: b.id)
    return sorted(by_id, key=lambda b: b.started_at, reverse=True)


def requeue_dead(
    t: Tables,
    now: datetime,
    stale_seconds: float,
    machine: str,
    alive: Callable[[int], bool],
    prune_after_seconds: float,
) -> list[tuple[str, str]]:
    dead = dead_brains(list_(t), now, stale_seconds, machine, alive)
    owners = {b.id for b in dead}
    found = []
    for run in list(t.runs.values()):
        if run.status in OWNED and run.owner in owners:
            t.runs[run.id] = replace(
                run, status=RunStatus.QUEUED, owner=None, lease_until=None, updated_at=now
            )
            found.append((run.id, run.session_id))
    for brain_id in prunable(dead, now, prune_after_seconds):
        del t.brains[brain_id]
    return found
