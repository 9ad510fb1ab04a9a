"""The runtime: owns the session actors, recovery at start and the reaper.

``serve`` runs for the life of the app inside its lifespan. At start it
re-queues runs left behind by a dead process (immediately when this process is
the only brain on the store, else once their leases expire) and wakes every
session with queued work; then every reaper interval it does the same for
leases that expired since.
"""

from __future__ import annotations

import logging

import anyio
from anyio.abc import TaskGroup, TaskStatus

from stead.prices import PriceTable
from stead.runtime.actor import SessionActor, claim_terms
from stead.runtime.deps import LoopDeps
from stead.runtime.work import WorkQueue
from stead.store import ClaimTerms, RunStart

log = logging.getLogger("stead.runtime")


class Runtime:
    def __init__(self, deps: LoopDeps, *, exclusive: bool) -> None:
        self._deps = deps
        self._exclusive = exclusive
        self._actors: dict[str, SessionActor] = {}
        self._group: TaskGroup | None = None

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        store = self._deps.store
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                owner = self._deps.owner if self._exclusive else None
                orphans = await store.requeue_runs(not_owned_by=owner)
                if orphans:
                    log.info("recovering %d runs left by a previous process", len(orphans))
                await self._wake_queued()
                task_status.started()
                while True:
                    await self._deps.clock.sleep(self._deps.settings.reaper_interval_seconds)
                    expired = await store.requeue_runs()
                    if expired:
                        log.info("re-queued %d runs whose lease expired", len(expired))
                    await self._wake_queued()
        finally:
            self._group = None
            with anyio.CancelScope(shield=True):
                await self._deps.tools.aclose()
                await self._deps.models.aclose()

    async def _wake_queued(self) -> None:
        for _, session_id in await self._deps.store.queued_runs():
            self.wake(session_id)

    @property
    def work(self) -> WorkQueue:
        """Self-hosted environments' work queue."""
        return self._deps.work

    @property
    def prices(self) -> PriceTable:
        """The list prices model requests are costed at."""
        return self._deps.prices

    def wake(self, session_id: str) -> None:
        """Make sure the session's queued runs get run."""
        actor = self._actor(session_id, poked=True)
        if actor is not None:
            actor.poke()

    def claim_terms(self, session_id: str) -> ClaimTerms | None:
        """Terms on which a caller may claim a run of ``session_id`` for this
        runtime (then ``take`` it); None while the runtime is not serving."""
        if self._group is None:
            return None
        return claim_terms(self._deps, session_id)

    def take(self, start: RunStart) -> None:
        """Runs a run claimed on ``claim_terms``, whose opening events the caller
        published; if the runtime stopped meanwhile, recovery re-queues it."""
        actor = self._actor(start.claim.session_id, poked=False)
        if actor is not None:
            actor.hand(start)

    def _actor(self, session_id: str, *, poked: bool) -> SessionActor | None:
        """The session's actor, started if it has none (None while not serving)."""
        actor = self._actors.get(session_id)
        if actor is not None or self._group is None:
            return actor
        actor = SessionActor(self._deps, session_id, poked=poked)
        self._actors[session_id] = actor
        self._group.start_soon(self._run_actor, actor)
        return actor

    async def _run_actor(self, actor: SessionActor) -> None:
        try:
            await actor.run()
        finally:
            self._actors.pop(actor.session_id, None)

    def interrupt(self, session_id: str) -> None:
        actor = self._actors.get(session_id)
        if actor is not None:
            actor.interrupt()
