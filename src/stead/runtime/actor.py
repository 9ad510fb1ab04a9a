"""A session actor: runs its session's queued runs one at a time.

It only sequences (STYLE anti-pattern 1): the work is in ``turn.py``. An
interrupt cancels the running turn and finishes it as interrupted; any other
failure leaves the run to its lease, so the reaper retries it (up to the
attempt limit) and other sessions never notice.
"""

from __future__ import annotations

import logging
from functools import partial

import anyio

from stead.runtime.deps import LoopDeps
from stead.runtime.turn import TurnRunner, opening_events
from stead.store import LeaseLost, RunClaim

log = logging.getLogger("stead.runtime")


class SessionActor:
    def __init__(self, deps: LoopDeps, session_id: str) -> None:
        self._deps = deps
        self.session_id = session_id
        self._poked = True
        self._interrupted = False
        self._scope: anyio.CancelScope | None = None

    def poke(self) -> None:
        """There may be new work: look again before stopping."""
        self._poked = True

    def interrupt(self) -> None:
        self._interrupted = True
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        """Until no queued run is left; the caller forgets the actor when this returns."""
        while self._poked:
            self._poked = False
            queue = [run_id for run_id, _ in await self._deps.store.queued_runs(self.session_id)]
            while queue:
                # A run that drained queued messages hands over the next one itself.
                next_run = await self._claim_and_run(queue.pop(0))
                if next_run is not None:
                    queue.insert(0, next_run)

    async def _claim_and_run(self, run_id: str) -> str | None:
        settings = self._deps.settings
        opening = partial(opening_events, max_attempts=settings.max_run_attempts)
        claimed = await self._deps.store.claim_run(
            run_id, self._deps.owner, settings.lease_seconds, opening
        )
        if claimed is None:
            return None
        claim, opened = claimed
        self._deps.bus.publish(self.session_id, opened)
        return await self._run_claim(claim)

    async def _run_claim(self, claim: RunClaim) -> str | None:
        runner = TurnRunner(self._deps, claim)
        self._interrupted = False
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
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
        if scope.cancelled_caught and self._interrupted:
            # Whatever goes wrong here stays with this session: an exception
            # out of an actor would end every session's runtime.
            try:
                with anyio.CancelScope(shield=True):
                    await runner.finish_interrupted()
            except LeaseLost:
                log.warning("session %s: lost the lease of run %s", self.session_id, claim.run_id)
                return None
            except Exception:
                log.exception(
                    "session %s: closing interrupted run %s failed", self.session_id, claim.run_id
                )
                return None
        return runner.next_run
