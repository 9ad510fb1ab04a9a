"""The work-queue aggregate of self-hosted environments: work items, their
leases, and the keys workers present (the narrow protocol; SQL in ``_work.py``).

A work item asks a worker to serve one session's built-in tools. It moves
``queued → starting → active → stopping → stopped`` (``TRANSITIONS``); a poll
claims a queued item (a new ``epoch`` and sessions token, which revokes the
last claim's), ack moves it to ``starting``, the first heartbeat to ``active``.
An item whose lease lapsed is queued again on the next poll and marked
``in_doubt``: tool calls its worker may have started are settled before a new
worker sees them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # base.py builds Store on WorkStore, so only types come from it
    from stead.store.paging import Page, PageRequest

NO_HEARTBEAT = "NO_HEARTBEAT"
TOKEN_PREFIX = "sk-stead-work-"
ENVIRONMENT_KEY_PREFIX = "sk-stead-env-"


class WorkState(enum.StrEnum):
    QUEUED = "queued"
    STARTING = "starting"
    ACTIVE = "active"
    STOPPING = "stopping"
    STOPPED = "stopped"


LIVE_STATES = (WorkState.QUEUED, WorkState.STARTING, WorkState.ACTIVE, WorkState.STOPPING)
"""An item that serves its session: a new turn's calls go to it. A stopping
one's worker may still run them, so none is queued beside it until it stopped
(two workers would run one call)."""
HELD_STATES = (WorkState.STARTING, WorkState.ACTIVE, WorkState.STOPPING)
"""A worker holds the item (acked it) and may be running its tools."""
TRANSITIONS: dict[WorkState, frozenset[WorkState]] = {
    WorkState.QUEUED: frozenset({WorkState.STARTING, WorkState.STOPPED}),
    WorkState.STARTING: frozenset(
        {WorkState.ACTIVE, WorkState.QUEUED, WorkState.STOPPING, WorkState.STOPPED}
    ),
    WorkState.ACTIVE: frozenset({WorkState.QUEUED, WorkState.STOPPING, WorkState.STOPPED}),
    WorkState.STOPPING: frozenset({WorkState.QUEUED, WorkState.STOPPED}),
    WorkState.STOPPED: frozenset(),
}


def check_transition(current: str, new: WorkState) -> None:
    """Raises ``ValueError`` on a move the lifecycle does not allow."""
    if new not in TRANSITIONS[WorkState(current)]:
        raise ValueError(f"work item cannot go from {current} to {new}")


@dataclass(frozen=True, slots=True)
class WorkItem:
    id: str
    workspace_id: str
    environment_id: str
    session_id: str | None
    state: str
    metadata: dict[str, str]
    epoch: int
    worker_id: str | None
    key_id: str | None
    """The environment key the current claim was polled with (revoking it ends the claim)."""
    last_heartbeat: str | None
    ttl_seconds: float
    lease_until: datetime | None
    in_doubt: bool
    created_at: datetime
    polled_at: datetime | None
    acknowledged_at: datetime | None
    started_at: datetime | None
    latest_heartbeat_at: datetime | None
    stop_requested_at: datetime | None
    stopped_at: datetime | None


@dataclass(frozen=True, slots=True)
class Claimed:
    """A poll's catch: the item and the sessions token of this claim (shown once)."""

    item: WorkItem
    token: str


@dataclass(frozen=True, slots=True)
class EnvironmentKey:
    id: str
    workspace_id: str
    environment_id: str
    hint: str
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True, slots=True)
class WorkToken:
    """Who a sessions token speaks for: the current claim of one item."""

    workspace_id: str
    environment_id: str
    work_id: str
    session_id: str | None
    epoch: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    depth: int
    pending: int
    oldest_queued_at: datetime | None


class HeartbeatRefused(Exception):
    """The ``expected_last_heartbeat`` precondition failed (another claim holds
    the item, or it was queued again); ``item`` is its current state."""

    def __init__(self, item: WorkItem, message: str) -> None:
        self.item = item
        super().__init__(message)


class WorkStore(Protocol):
    async def create_environment_key(
        self, workspace_id: str, environment_id: str
    ) -> tuple[EnvironmentKey, str]:
        """A new key for a self-hosted environment; the secret is returned once.
        Raises ``NotFound`` (no such environment) or ``Conflict`` (not self-hosted)."""
        ...

    async def revoke_environment_key(
        self, workspace_id: str, environment_id: str, key_id: str
    ) -> EnvironmentKey:
        """Revokes the key, and with it the claims polled with it: their sessions
        tokens authenticate nothing more, and an item a worker held is claimable
        again at once (its calls in doubt, as after a lapsed lease)."""
        ...

    async def authenticate_environment_key(self, secret: str) -> EnvironmentKey | None: ...

    async def authenticate_work_token(self, secret: str) -> WorkToken | None:
        """The claim a sessions token belongs to; None once the item stopped or
        was claimed again, or the key it was polled with is revoked."""
        ...

    async def ensure_work_item(
        self, workspace_id: str, environment_id: str, session_id: str, ttl_seconds: float
    ) -> WorkItem | None:
        """The session's live item, or a new queued one; or, queueing none, its
        newest item if that stopped with calls in doubt (``in_doubt``: answer
        them, then ``settled_work``). None when the environment is not
        self-hosted (idempotent)."""
        ...

    async def poll_work(
        self,
        workspace_id: str,
        environment_id: str,
        worker_id: str | None,
        reclaim_after: float,
        key_id: str | None = None,
    ) -> Claimed | None:
        """Claims the oldest claimable item: queued and not polled in the last
        ``reclaim_after`` seconds, or held by a worker whose lease lapsed.
        ``key_id``: the environment key the poll came with."""
        ...

    async def ack_work(self, workspace_id: str, environment_id: str, work_id: str) -> WorkItem: ...

    async def heartbeat_work(
        self,
        workspace_id: str,
        environment_id: str,
        work_id: str,
        expected: str | None,
        ttl_seconds: float,
        epoch: int | None,
    ) -> tuple[WorkItem, bool]:
        """(item, lease extended). ``epoch``: the claim a sessions token was
        issued for (None for an environment key). Raises ``HeartbeatRefused``."""
        ...

    async def stop_work(
        self, workspace_id: str, environment_id: str, work_id: str, force: bool
    ) -> WorkItem: ...

    async def latest_work(self, session_id: str) -> WorkItem | None:
        """The session's newest item, live or stopped; None when it has none."""
        ...

    async def settled_work(self, work_id: str, epoch: int) -> None:
        """The tool calls in doubt after a lost lease are answered."""
        ...

    async def get_work(self, workspace_id: str, environment_id: str, work_id: str) -> WorkItem: ...

    async def update_work_metadata(
        self, workspace_id: str, environment_id: str, work_id: str, patch: dict[str, Any]
    ) -> WorkItem: ...

    async def list_work(
        self, workspace_id: str, environment_id: str, page: PageRequest
    ) -> Page[WorkItem]: ...

    async def work_stats(self, workspace_id: str, environment_id: str) -> QueueStats: ...
