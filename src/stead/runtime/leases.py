"""The lease sweeper: expires sandbox leases and destroys their sandboxes (DESIGN rule 9).

Each round expires, in one store transaction, every lease whose TTL passed or
whose condition holds (session terminated, archived or deleted, environment archived),
then destroys the sandbox of every expired lease through the injected
``destroy`` callback and records it destroyed. A destroy that fails or overruns
its timeout is logged and tried again next round; it never stops the loop. The
sweeper knows sandboxes only by id: how to destroy one is the caller's business.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskStatus

from stead.runtime.clock import Clock, SystemClock
from stead.runtime.rounds import survived
from stead.store import LeaseStore, SandboxLease

log = logging.getLogger("stead.runtime.leases")

Destroy = Callable[[SandboxLease], Awaitable[SandboxLease | None]]
"""Destroys the lease's sandbox and returns the lease as it acted on it (read
again: it may have ended once more since it was listed); None when the lease
is active again and nothing was destroyed. Must be idempotent (a missing
sandbox is done)."""


@dataclass
class SweepRound:
    """What one round did."""

    expired: list[SandboxLease] = field(default_factory=list)
    destroyed: list[str] = field(default_factory=list)
    """Sandbox ids whose destroy this round recorded."""
    failed: list[str] = field(default_factory=list)
    """Sandbox ids whose destroy failed or timed out; retried next round."""


class LeaseSweeper:
    def __init__(
        self,
        store: LeaseStore,
        destroy: Destroy,
        *,
        interval: float,
        destroy_timeout: float,
        clock: Clock | None = None,
        concurrency: int = 4,
    ) -> None:
        """``interval``: seconds between rounds. ``destroy_timeout``: longest one
        ``destroy`` may take. ``concurrency``: destroys run at once in a round."""
        if interval <= 0 or destroy_timeout <= 0 or concurrency < 1:
            raise ValueError("interval and destroy_timeout must be > 0, concurrency >= 1")
        self._store = store
        self._destroy = destroy
        self._interval = interval
        self._destroy_timeout = destroy_timeout
        self._clock = clock or SystemClock()
        self._limit = anyio.CapacityLimiter(concurrency)
        self._poked = False
        self._waiting: anyio.CancelScope | None = None

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Runs rounds until cancelled, the first at once (leases a previous process
        left), the next after ``interval`` or at once when poked. A round that
        fails is skipped (``rounds``)."""
        task_status.started()
        while True:
            self._poked = False
            await survived("lease sweep", self.sweep)
            if self._poked:  # during the round: what it asked for may be newer
                continue
            with anyio.CancelScope() as self._waiting:
                await self._clock.sleep(self._interval)
            self._waiting = None

    def poke(self) -> None:
        """Asks for a round now (a lease was just expired on purpose)."""
        self._poked = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def sweep(self) -> SweepRound:
        """One round: expire, then destroy what is expired and not yet destroyed."""
        done = SweepRound(expired=await self._store.expire_sandbox_leases(now=self._clock.now()))
        if done.expired:
            reasons = ", ".join(
                f"{lease.sandbox_id} ({lease.expiry_reason})" for lease in done.expired
            )
            log.info("expired %d sandbox leases: %s", len(done.expired), reasons)
        pending = await self._store.leases_to_destroy()
        async with anyio.create_task_group() as group:
            for lease in pending:
                group.start_soon(self._destroy_one, lease, done)
        return done

    async def _destroy_one(self, lease: SandboxLease, done: SweepRound) -> None:
        sandbox_id = lease.sandbox_id
        async with self._limit:
            try:
                with anyio.fail_after(self._destroy_timeout):
                    ended = await self._destroy(lease)
            except Exception:  # the sandbox's failure, not ours: log it, retry next round
                log.warning("destroying sandbox %s failed; retrying", sandbox_id, exc_info=True)
                done.failed.append(sandbox_id)
                return
        if ended is None:
            return  # taken again: in use, not destroyed
        # For the reason it acted on: had the session been deleted since, the
        # lease stays expired and the next round destroys again, erasing.
        if await self._store.mark_sandbox_destroyed(
            sandbox_id, now=self._clock.now(), reason=ended.expiry_reason
        ):
            done.destroyed.append(sandbox_id)
