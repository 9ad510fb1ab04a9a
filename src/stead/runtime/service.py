"""The runtime: owns the session actors, recovery at start and the reaper, and
the one way a committed write reaches readers and runs (``committed``).

``serve`` runs for the life of the app inside its lifespan. It starts the bus
(notices from other processes come to this runtime as its ``Peers``). At start
it re-queues runs left behind by a dead process (immediately when this process
is the only brain on the store, else once their leases expire) and wakes every
session with queued work; then every reaper interval it does the same for
leases that expired since. A round the database cannot serve is skipped (the
one at start too, which the next round then makes), so the runtime outlives a
database restart and catches up once it is back.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial

import anyio
from anyio.abc import TaskGroup, TaskStatus

from stead.events import EventType
from stead.prices import PriceTable
from stead.runtime.actor import SessionActor, claim_terms
from stead.runtime.brains import Brain
from stead.runtime.deps import LoopDeps
from stead.runtime.events import session_deleted
from stead.runtime.mcp import McpGateway
from stead.runtime.rounds import survived
from stead.runtime.work import WorkQueue
from stead.store import (
    STARTS_WORK,
    ClaimTerms,
    DatabaseBusy,
    EventRecord,
    EventsAccepted,
    NotFound,
    RunStart,
    SandboxLease,
)
from stead.telemetry import detached

log = logging.getLogger("stead.runtime")


class Runtime:
    def __init__(self, deps: LoopDeps, *, exclusive: bool) -> None:
        self._deps = deps
        self._exclusive = exclusive
        self._actors: dict[str, SessionActor] = {}
        self._group: TaskGroup | None = None
        self._recovered = False
        """Whether the recovery at start was made (else the next reaper round makes it)."""

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        deps = self._deps
        # Alone on the store (SQLite, under the data directory's lock), every run
        # another owner holds is orphaned; sharing it, only those of dead brains are.
        brain = None if self._exclusive else Brain(deps.settings, deps.store, deps.owner)
        try:
            async with anyio.create_task_group() as group:
                self._group = group
                await group.start(deps.bus.serve, self)
                if brain is not None:
                    await group.start(brain.serve)
                # Skipped, as a reaper round is, when the database cannot serve
                # it now (before, it ended the start with a traceback): the
                # reaper's rounds recover what is left once it can.
                await survived("recovery at start", partial(self._recover, brain))
                task_status.started()
                while True:
                    await deps.clock.sleep(deps.settings.reaper_interval_seconds)
                    await survived("reaper round", partial(self._reap, brain))
        finally:
            self._group = None
            with anyio.CancelScope(shield=True):
                await deps.tools.aclose()
                await deps.models.aclose()

    async def _recover(self, brain: Brain | None) -> None:
        owner = self._deps.owner if self._exclusive else None
        orphans = await self._deps.store.requeue_runs(not_owned_by=owner)
        orphans += await brain.recover() if brain is not None else []
        if orphans:
            log.info("recovering %d runs left by a previous process", len(orphans))
        self._recovered = True
        await self._wake_queued()

    async def _reap(self, brain: Brain | None) -> None:
        if not self._recovered:
            return await self._recover(brain)
        expired = await self._deps.store.requeue_runs()
        if expired:
            log.info("re-queued %d runs whose lease expired", len(expired))
        orphans = await brain.recover() if brain is not None else []
        if orphans:
            log.info("re-queued %d runs of processes that died", len(orphans))
        await self._wake_queued()

    async def _wake_queued(self) -> None:
        for _, session_id in await self._deps.store.queued_runs():
            self.wake(session_id)

    @property
    def work(self) -> WorkQueue:
        """Self-hosted environments' work queue."""
        return self._deps.work

    @property
    def mcp(self) -> McpGateway:
        """MCP servers of sessions' agents, and the egress rules their traffic keeps."""
        return self._deps.mcp

    @property
    def prices(self) -> PriceTable:
        """The list prices model requests are costed at."""
        return self._deps.prices

    def committed(
        self,
        session_id: str,
        events: Sequence[EventRecord] = (),
        *,
        started: RunStart | None = None,
        queued: bool = False,
    ) -> None:
        """Commit -> publish -> wake: what a writer outside the loop calls once its
        write returned (rule 1). Readers here and elsewhere learn of ``events``,
        then of the opening events of ``started`` (a run the write claimed on
        ``claim_terms``), which goes to its actor here; ``queued`` (the write
        queued work it did not claim) wakes this runtime and tells the others,
        so whichever claims first runs it."""
        if started is not None:
            # Handed over before the readers are woken, so the loop runs the
            # turn (up to its model request going out) first and the frames
            # follow while the model answers; the bus order is the same.
            self.take(started)
        self._deps.bus.publish(session_id, events)
        self._announce(session_id, started, queued)

    def accepted(self, session_id: str, accepted: EventsAccepted) -> None:
        """``committed`` for user events: their echoes, an interrupt among them
        (here and wherever the turn runs), the run they queued or claimed."""
        if accepted.started is not None:
            self.take(accepted.started)
        self._deps.bus.publish(session_id, accepted.published)
        if any(e.type == EventType.USER_INTERRUPT for e in accepted.logged):
            # A run this request started is stopped only by an interrupt sent
            # after what started it ("stop, then do this" keeps its new turn).
            if accepted.started is None or _interrupts_after_work(accepted.logged):
                self.interrupt(session_id)
            self._deps.bus.interrupt(session_id)
        self._announce(session_id, accepted.started, accepted.starts_work)

    def _announce(self, session_id: str, started: RunStart | None, queued: bool) -> None:
        """Readers learn of the opening events of a run this process took; work
        queued but not taken wakes this runtime and tells the others, so
        whichever claims first runs it."""
        if started is not None:
            self._deps.bus.publish(session_id, started.opened)
        elif queued:
            self.wake(session_id)
            self._deps.bus.run_queued(session_id)

    async def vault_changed(self, vault_id: str) -> None:
        """A credential of ``vault_id`` changed: sandboxes served by any process get
        the new set (the others refresh theirs when the notice reaches them)."""
        self._deps.bus.credentials_changed(vault_id)
        await self._deps.tools.credentials_changed(vault_id)

    def resources_changed(self, session_id: str) -> None:
        """The session's resources were added or deleted: its sandbox is staged
        again before its next use, wherever a turn of it runs."""
        self._deps.tools.resources_changed(session_id)
        self._deps.bus.resources_changed(session_id)

    def restage(self, session_id: str) -> None:
        """Another process changed the session's resources (``Peers``)."""
        self._deps.tools.resources_changed(session_id)

    async def repository_tokens_changed(self, session_id: str) -> None:
        """A repository resource of the session was updated or deleted: its
        sandbox gets the new set of tokens, wherever it is served."""
        await self.vault_changed(session_id)

    def credentials_changed(self, vault_id: str) -> None:
        """Another process changed a credential of ``vault_id`` (``Peers``)."""
        if self._group is not None:
            self._group.start_soon(self._deps.tools.credentials_changed, vault_id)

    async def destroy_sandbox(self, lease: SandboxLease) -> SandboxLease | None:
        """The lease sweeper's destroy (``leases.Destroy``): the sandbox goes, then
        the other processes let go of what they held of it (a sandbox is served
        by whichever process runs its session's turn, so each may hold some)."""
        ended = await self._deps.tools.destroy(lease)
        if ended is not None:
            self._deps.bus.sandbox_destroyed(ended.sandbox_id, ended.created_at.isoformat())
        return ended

    def sandbox_destroyed(self, sandbox_id: str, incarnation: str) -> None:
        """Another process destroyed the sandbox (``Peers``)."""
        if self._group is not None:
            self._group.start_soon(self._forget, sandbox_id, incarnation)

    async def _forget(self, sandbox_id: str, incarnation: str) -> None:
        try:
            await self._deps.tools.forget(sandbox_id, incarnation)
        except DatabaseBusy as exc:  # what is held stays; nothing is wrong in using it
            log.warning("sandbox %s: what this process held of it stays: %s", sandbox_id, exc)

    def reconnected(self, read: Sequence[str]) -> None:
        """Notices from other processes were lost (``Peers``): an interrupt sent
        through another process meanwhile is looked for in each running turn's
        log, and each such turn's sandbox is staged again before its next call
        (its resources may have changed); the readers of a session ``read``
        here that was deleted meanwhile are told so (their streams end); every
        sandbox served here gets its credentials again (a revoked one must stop
        being injected)."""
        if self._group is not None:
            self._group.start_soon(self._deps.tools.credentials_changed, None)
            for actor in list(self._actors.values()):
                self._deps.tools.resources_changed(actor.session_id)
                self._group.start_soon(actor.look_for_interrupt)
            if read:
                self._group.start_soon(self._end_deleted, list(read))

    async def _end_deleted(self, read: list[str]) -> None:
        for session_id in read:
            try:
                await self._deps.store.session_snapshot(session_id)
            except NotFound:
                self._deps.bus.publish_final(session_id, session_deleted(session_id))
            except Exception as exc:  # the next reconnect, or a notice, tells them
                log.warning("session %s: not looked up now: %s", session_id, exc)
                return

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
        publishes before it next awaits (the run starts no sooner); if the
        runtime stopped meanwhile, recovery re-queues it."""
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
            # Started by whichever request queued work first, its turns are
            # no part of that request: each turn's span starts its own trace.
            with detached():
                await actor.run()
        except Exception:
            # Out of here, it would end the runtime's task group: every session's
            # turns. The session's queued run stays; the reaper wakes it again.
            log.exception("session %s: its runs stopped on an error", actor.session_id)
        finally:
            self._actors.pop(actor.session_id, None)

    def interrupt(self, session_id: str) -> None:
        actor = self._actors.get(session_id)
        if actor is not None:
            actor.interrupt()


def _interrupts_after_work(logged: Sequence[EventRecord]) -> bool:
    """Whether a ``user.interrupt`` follows an event that starts work."""
    working = False
    for event in logged:
        if event.type == EventType.USER_INTERRUPT and working:
            return True
        working = working or event.type in STARTS_WORK
    return False
