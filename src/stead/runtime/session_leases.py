"""The lease a session's sandbox is held by (DESIGN rule 9): its terms, and
taking it, which every tool call and terminal does. A lease that ended for
good (the session terminated, archived or deleted, its environment archived) or a
limit reached stops the tools with ``NoSandbox``, whose text the model reads."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import NoReturn, Protocol, TypeVar

import anyio

from stead.runtime.placements import SandboxPlacements
from stead.runtime.together import together
from stead.sandbox import NoSandbox, SandboxError
from stead.store import (
    DatabaseBusy,
    LeaseStore,
    LeaseTerms,
    LimitReached,
    SandboxLease,
    SandboxLeaseEnded,
    SessionRecord,
)

log = logging.getLogger("stead.runtime.leases")

T = TypeVar("T")

RENEWALS_PER_TTL = 3
"""A tool call still running renews its session's lease this often per TTL."""

LEASE_ENDED = "This session's sandbox was released (its lease ended); tools cannot run."


class SessionLeaseStore(LeaseStore, Protocol):
    async def session_snapshot(self, session_id: str) -> SessionRecord: ...


class SessionLeases:
    def __init__(
        self, store: SessionLeaseStore, placements: SandboxPlacements, ttl_seconds: float
    ) -> None:
        self._store = store
        self._placements = placements
        self._ttl_seconds = ttl_seconds

    async def terms(self, session: SessionRecord) -> LeaseTerms:
        """The session's sandbox lease as this process takes it: on its own host
        when the lease names none yet."""
        return LeaseTerms(
            sandbox_id=session.id,
            workspace_id=session.workspace_id,
            session_id=session.id,
            environment_id=session.environment_id,
            agent_id=session.agent.get("id"),
            ttl_seconds=self._ttl_seconds,
            host=await self._placements.home(),
        )

    async def take(self, session_id: str) -> SandboxLease:
        """Acquires or renews the session's lease, within the workspace's limits."""
        terms = await self.terms(await self._store.session_snapshot(session_id))
        try:
            return await self._store.acquire_sandbox_lease(
                terms.sandbox_id,
                workspace_id=terms.workspace_id,
                session_id=terms.session_id,
                environment_id=terms.environment_id,
                agent_id=terms.agent_id,
                ttl_seconds=terms.ttl_seconds,
                enforce_limits=True,
                host=terms.host,
            )
        except SandboxLeaseEnded:
            raise NoSandbox(LEASE_ENDED) from None
        except LimitReached as exc:
            raise NoSandbox(str(exc)) from None


async def keep_renewing(renew: Callable[[], Awaitable[object]], interval: float) -> NoReturn:
    """Calls ``renew`` every ``interval`` seconds until cancelled: what keeps
    using a session's sandbox (a tool call in progress, an attached terminal) is
    activity (rule 9); renewed only when it began, a command or a terminal that
    outlived the lease's TTL had its sandbox destroyed under it by the sweeper.
    A renewal that fails (the lease ended for good, the database is away) is
    left to the next one."""
    while True:
        await anyio.sleep(interval)
        try:
            await renew()
        except (SandboxError, DatabaseBusy) as exc:
            log.info("a session's lease was not renewed now: %s", exc)


async def renewing(
    call: Callable[[], Awaitable[T]],
    renew: Callable[[], Awaitable[object]],
    interval: float | None,
) -> T:
    """``call``'s result, ``keep_renewing`` beside it while it runs (None: no
    leases to renew)."""
    if interval is None:
        return await call()
    keeping = anyio.CancelScope()

    async def run() -> T:
        try:
            return await call()
        finally:
            keeping.cancel()

    async def keep() -> None:
        with keeping:
            await keep_renewing(renew, interval)

    result, _ = await together(run, keep)
    return result
