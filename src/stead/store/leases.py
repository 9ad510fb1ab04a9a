"""``LeaseStore``: sandbox leases (DESIGN rule 9) and each sandbox's active time
(the narrow protocol and its records; SQL in ``_leases.py``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


class SandboxLeaseStatus(enum.StrEnum):
    """``active -> expired -> destroyed``; an ended lease becomes active again only
    when its expiry is ``REPLACEABLE_EXPIRIES`` (DESIGN rule 9)."""

    ACTIVE = "active"
    EXPIRED = "expired"
    DESTROYED = "destroyed"


class LeaseExpiry(enum.StrEnum):
    """Why a sandbox lease ended."""

    TTL = "ttl"
    SESSION_TERMINATED = "session_terminated"
    SESSION_ARCHIVED = "session_archived"
    """Archived sessions take no more turns, terminals or files, and are never unarchived."""
    SESSION_DELETED = "session_deleted"
    ENVIRONMENT_ARCHIVED = "environment_archived"
    """The environment was archived or deleted."""
    EXPLICIT = "explicit"


REPLACEABLE_EXPIRIES = (LeaseExpiry.TTL, LeaseExpiry.EXPLICIT)
"""Ends after which acquiring the sandbox again starts a new lease; after any other
the sandbox's reason to exist is gone and acquire raises ``SandboxLeaseEnded``."""


@dataclass(frozen=True, slots=True)
class SandboxLease:
    """What binds a sandbox to what it serves: a session, or an agent and environment."""

    sandbox_id: str
    """The session id, or ``{agent_id}::{environment_id}`` for a shared sandbox."""
    workspace_id: str
    session_id: str | None
    environment_id: str
    agent_id: str | None
    status: SandboxLeaseStatus
    expiry_reason: LeaseExpiry | None
    ttl_seconds: float
    created_at: datetime
    last_activity_at: datetime
    expires_at: datetime
    expired_at: datetime | None
    destroyed_at: datetime | None
    host_id: str | None = None
    """The sandbox host that holds the sandbox; None before its first acquire by a
    process with a host, and after it was destroyed."""
    host_address: str | None = None
    """Where other processes reach that host (``tcp://host:port``); None: they cannot."""
    placement: int = 0
    """How many times the sandbox was placed on a host: one more at each placement
    (a first host, a move). Sandbox calls carry it, so a host knows when its copy
    is no longer the current one, and a move is fenced by it."""


@dataclass(frozen=True, slots=True)
class LeaseHost:
    """A sandbox host as a lease records it."""

    host_id: str
    address: str | None


@dataclass(frozen=True, slots=True)
class LeaseTerms:
    """A sandbox lease to acquire or renew, as ``Store.acquire_sandbox_lease`` takes it."""

    sandbox_id: str
    workspace_id: str
    session_id: str | None
    environment_id: str
    agent_id: str | None
    ttl_seconds: float
    host: LeaseHost | None = None
    """The acquirer's own sandbox host: recorded when the lease holds none."""


class LeaseStore(Protocol):
    # sandbox leases and usage (DESIGN rule 9). ``now`` defaults to the store's clock.
    async def acquire_sandbox_lease(
        self,
        sandbox_id: str,
        *,
        workspace_id: str,
        session_id: str | None,
        environment_id: str,
        agent_id: str | None,
        ttl_seconds: float,
        enforce_limits: bool = False,
        host: LeaseHost | None = None,
        now: datetime | None = None,
    ) -> SandboxLease:
        """Idempotent: renews the active lease (``expires_at = now + ttl_seconds``), or
        creates it, or replaces one that ended by TTL or explicitly. A lease that
        records no host (new, or its sandbox destroyed) records ``host``, one
        placement later; one that records a host keeps it. Raises
        ``SandboxLeaseEnded`` when the lease ended otherwise, or when the session is
        terminated or gone or the environment archived or gone (nothing is written);
        ``Conflict`` when the sandbox belongs to another workspace. Safe to call
        concurrently for one id: exactly one lease row results. ``enforce_limits``:
        ``LimitReached`` (nothing written) when a limit (``limits.py``) stops it."""
        ...

    async def move_sandbox_lease(
        self, sandbox_id: str, *, placement: int, host: LeaseHost
    ) -> SandboxLease | None:
        """Records ``host`` as holding the sandbox, one placement later, if the
        active lease is still at ``placement`` (compare and set: of processes
        moving it from one placement, one wins). The lease as it is after,
        moved or not; None if it is not active."""
        ...

    async def renew_sandbox_lease(self, sandbox_id: str, *, now: datetime | None = None) -> bool:
        """Pushes an active lease's expiry to ``now + ttl_seconds``; False if not active."""
        ...

    async def expire_sandbox_leases(self, *, now: datetime | None = None) -> list[SandboxLease]:
        """Expires, in one transaction, every active lease whose TTL passed, whose
        session is terminated, archived or deleted, or whose environment is archived or
        deleted; returns them. A named condition wins over ``ttl`` when both hold."""
        ...

    async def expire_sandbox_lease(
        self,
        sandbox_id: str,
        *,
        reason: LeaseExpiry = LeaseExpiry.EXPLICIT,
        now: datetime | None = None,
    ) -> bool:
        """Expires one active lease with ``reason``; False if it was not active."""
        ...

    async def sandbox_lease(self, sandbox_id: str) -> SandboxLease | None:
        """The sandbox's lease in any status; None if it never had one."""
        ...

    async def leases_to_destroy(self) -> list[SandboxLease]:
        """Expired leases whose sandbox is not yet destroyed, oldest expiry first."""
        ...

    async def mark_sandbox_destroyed(
        self,
        sandbox_id: str,
        *,
        now: datetime | None = None,
        reason: LeaseExpiry | None = None,
    ) -> bool:
        """Records that an expired lease's sandbox is gone (no host holds it now);
        False (and no change) if the lease is not expired (acquired again since),
        or ended for another ``reason`` than the one its destroy acted on (None:
        any): its session was deleted meanwhile, and its sandbox is to be
        destroyed again, erased."""
        ...

    async def add_sandbox_active_seconds(
        self,
        sandbox_id: str,
        *,
        session_id: str | None,
        workspace_id: str,
        seconds: float,
        now: datetime | None = None,
    ) -> None:
        """Adds ``seconds`` (>= 0, else ValueError) to the sandbox's cumulative active time."""
        ...

    async def sandbox_active_seconds(self, sandbox_id: str) -> float:
        """Cumulative active seconds of the sandbox (0.0 if none were recorded)."""
        ...
