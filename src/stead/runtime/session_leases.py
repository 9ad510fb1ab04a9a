"""The lease a session's sandbox is held by (DESIGN rule 9): its terms, and
taking it, which every tool call and terminal does. A lease that ended for
good (the session terminated or deleted, its environment archived) or a
limit reached stops the tools with ``NoSandbox``, whose text the model reads."""

from __future__ import annotations

from typing import Protocol

from stead.runtime.placements import SandboxPlacements
from stead.sandbox import NoSandbox
from stead.store import (
    LeaseStore,
    LeaseTerms,
    LimitReached,
    SandboxLease,
    SandboxLeaseEnded,
    SessionRecord,
)

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
