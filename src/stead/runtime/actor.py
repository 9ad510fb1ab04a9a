"""A session actor: runs its session's queued runs one at a time.

It only sequences (STYLE anti-pattern 1): the work is in ``turn.py``. An
interrupt cancels the running turn and finishes it as interrupted; any other
failure leaves the run to its lease, so the reaper retries it (up to the
attempt limit) and other sessions never notice.
"""

from __future__ import annotations

import logging
from collections import deque
from functools import partial

import anyio

from stead.events import EventType
from stead.runtime.deps import LoopDeps
from stead.runtime.plan import next_model_step
from stead.runtime.turn import TurnRunner, opening_events
from stead.store import ClaimTerms, DatabaseBusy, LeaseLost, RunStart

log = logging.getLogger("stead.runtime")

PAGE = 500
"""Events read at a time when a turn's log is searched for an interrupt."""


def claim_terms(deps: LoopDeps, session_id: str) -> ClaimTerms:
    """How this process takes a run of ``session_id``."""
    settings = deps.settings
    since, held = deps.logs.held(session_id)
    return ClaimTerms(
        owner=deps.owner,
        lease_seconds=settings.lease_seconds,
        opening=partial(opening_events, max_attempts=settings.max_run_attempts),
        since=since,
        plan=next_model_step(deps, held),
    )


class SessionActor:
    def __init__(self, deps: LoopDeps, session_id: str, *, poked: bool = True) -> None:
        """``poked``: look for queued runs at once (False for an actor made to run a
        handed run only)."""
        self._deps = deps
        self.session_id = session_id
        self._poked = poked
        self._handed: deque[RunStart] = deque()
        self._interrupted = False
        self._scope: anyio.CancelScope | None = None
        self._opened_at: int | None = None
        """The seq of the running run's opening events: an interrupt logged
        after it is meant for that run."""

    def poke(self) -> None:
        """There may be new work: look again before stopping."""
        self._poked = True

    def hand(self, start: RunStart) -> None:
        """A run the caller claimed (and whose opening events it published)."""
        self._handed.append(start)

    def interrupt(self) -> None:
        self._interrupted = True
        if self._scope is not None:
            self._scope.cancel()

    async def look_for_interrupt(self) -> None:
        """Interrupts the running turn if its log has a ``user.interrupt`` logged
        after the run began (one whose notice from another process was lost)."""
        seq = opened_at = self._opened_at
        try:
            while seq is not None and self._opened_at == opened_at:
                found = await self._deps.store.events_after(self.session_id, seq, PAGE)
                if self._opened_at != opened_at:
                    return  # that run is over
                if any(e.type == EventType.USER_INTERRUPT for e in found):
                    log.info("session %s: an interrupt whose notice was lost", self.session_id)
                    self.interrupt()
                    return
                seq = found[-1].seq if len(found) == PAGE else None
        except Exception as exc:  # the next reconnect looks again
            log.warning("session %s: no interrupt looked for now: %s", self.session_id, exc)

    async def run(self) -> None:
        """Until no queued run is left; the caller forgets the actor when this returns."""
        next_run: str | None = None
        while (start := await self._next_or_none(next_run)) is not None:
            # A run that drained queued messages names the next one itself.
            next_run = await self._run_claim(start)

    async def _next_or_none(self, run_id: str | None) -> RunStart | None:
        """``_next``, or None while the database cannot serve the claim: the run
        stays queued (or its lease expires) and the reaper wakes the session again."""
        try:
            return await self._next(run_id)
        except DatabaseBusy as exc:
            log.warning("session %s: no run claimed now: %s", self.session_id, exc)
            return None

    async def _next(self, run_id: str | None) -> RunStart | None:
        """A handed run, else ``run_id`` claimed, else, when poked, the oldest queued one."""
        store = self._deps.store
        while True:
            if self._handed:
                return self._handed.popleft()
            terms = claim_terms(self._deps, self.session_id)
            if run_id is not None:
                start = await store.claim_run(run_id, terms)
                run_id = None
            elif self._poked:
                self._poked = False
                start = await store.claim_next(self.session_id, terms)
            else:
                return None
            if start is not None:
                self._deps.bus.publish(self.session_id, start.opened)
                return start

    async def _run_claim(self, start: RunStart) -> str | None:
        runner = TurnRunner(self._deps, start)
        claim = start.claim
        seqs = [e.seq for e in start.opened if e.seq is not None]
        self._opened_at = max(seqs) if seqs else None
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self._interrupted:
                    # Before it began: sent with the events that started it, or
                    # while the run before it ended.
                    scope.cancel()
                await runner.run()
        except LeaseLost:
            log.warning("session %s: lost the lease of run %s", self.session_id, claim.run_id)
            return None
        except Exception:
            log.exception(
                "session %s: run %s failed; its lease will expire and it will be retried",
                self.session_id,
                claim.run_id,
            )
            return None
        finally:
            self._scope = None
            self._opened_at = None
            interrupted, self._interrupted = self._interrupted, False
        if scope.cancelled_caught and interrupted:
            # Whatever goes wrong here stays with this session: an exception
            # out of an actor would end every session's runtime.
            try:
                with anyio.CancelScope(shield=True):
                    await runner.finish_interrupted()
            except LeaseLost:
                # Also when the interrupt came as the run's own last write
                # committed: that write may have queued the next run.
                log.warning("session %s: lost the lease of run %s", self.session_id, claim.run_id)
                return runner.next_run
            except Exception:
                log.exception(
                    "session %s: closing interrupted run %s failed", self.session_id, claim.run_id
                )
                return None
        return runner.next_run
