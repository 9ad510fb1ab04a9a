"""``RunLedger``: runs (one per turn of work) with their leases and fencing
epochs, and the side-effect ledger (the narrow protocol and its records; SQL in
``_runs.py`` and ``_claims.py``).

A claim bumps the run's epoch; every write on its behalf (``run_write``) checks
that epoch in its own transaction and raises ``LeaseLost`` when it moved on
(DESIGN rule 4). Ops are recorded started before their side effect and
completed, with the result, beside the event that reports them (rule 5).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stead.events import EventType
from stead.store.events import EventRecord, NewEvent
from stead.store.leases import LeaseTerms, SandboxLease
from stead.store.sessions import SessionRecord
from stead.store.usage import RequestUsage


class RunStatus(enum.StrEnum):
    """Lifecycle of one turn. Session status is derived from it (DESIGN rule 2)."""

    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    DONE = "done"
    FAILED = "failed"


LIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)


STARTS_WORK = frozenset(
    {
        EventType.USER_MESSAGE,
        EventType.USER_CUSTOM_TOOL_RESULT,
        EventType.USER_TOOL_CONFIRMATION,
        EventType.USER_TOOL_RESULT,
    }
)
"""Logged, these give the agent loop something to do: a run is queued in the same
transaction, so no crash can leave a message that nothing will answer."""


@dataclass(frozen=True, slots=True)
class RunClaim:
    """A run this process now owns: every write for it carries ``epoch``."""

    run_id: str
    session_id: str
    epoch: int
    attempts: int


@dataclass(frozen=True, slots=True)
class ClaimTerms:
    """How the agent loop takes a run: who owns it, for how long, what it logs
    on taking it (``opening(attempts)``), and the last ``seq`` of the session's
    log it already holds (the claim returns the log after it)."""

    owner: str
    lease_seconds: float
    opening: Callable[[int], Sequence[NewEvent]]
    since: int = 0
    plan: Callable[[RunClaim, SessionRecord, Sequence[EventRecord]], RunWrite | None] | None = None
    """The run's first write, worked out from the claim, the session and the log
    after ``since`` and made in the claiming transaction (None: nothing yet)."""


@dataclass(frozen=True, slots=True)
class RunStart:
    """A run just taken, with what its first step needs, all from the claiming
    transaction: no read follows a claim."""

    claim: RunClaim
    opened: list[EventRecord]
    """The events ``opening`` and ``plan`` logged (to publish)."""
    session: SessionRecord
    since: int
    """``ClaimTerms.since``."""
    log: list[EventRecord]
    """The session's log after ``since``, ``opened`` included."""
    lease: SandboxLease | None = None
    """The session's sandbox lease as the claim found it (None: it had none)."""


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One side effect in the ledger: ``started``, or ``completed`` with its result."""

    op_key: str
    run_id: str
    kind: str
    status: str
    result: Any
    epoch: int
    placement: int | None = None
    """The session's sandbox placement when the op started (``SandboxLease.placement``),
    when its start renewed the lease (``RunWrite.lease``); None otherwise."""


@dataclass(frozen=True, slots=True)
class RunWrite:
    """What one fenced transaction of the agent loop writes, all or nothing."""

    events: Sequence[NewEvent] = ()
    ops_started: Sequence[tuple[str, str]] = ()
    """(op_key, kind) recorded as started before the side effect runs."""
    ops_completed: Sequence[tuple[str, Any]] = ()
    """(op_key, result) recorded with the events that report them."""
    usage: RequestUsage | None = None
    """Added to the session's cumulative usage and the workspace's ledger."""
    sandbox_seconds: float | None = None
    """The host's count of the session's sandbox's active seconds: booked up to it."""
    budget_gate: bool = False
    """Write nothing and raise ``BudgetReached`` when the session's budget is reached
    (checked under the session's lock, so an update that raises it is seen)."""
    terminate: bool = False
    """End the session for good: ``terminated_at`` set and ``session.status_terminated``
    logged last, after the drained queue (the run's status is the caller's)."""
    status: RunStatus | None = None
    """The run's new status (``DONE`` ends it)."""
    closing: bool = False
    """``events`` answer calls the run gives up on (an interrupt): an answer for
    a call that has one already (a client's, accepted since the run read the
    log) is left out, so no call gets two."""
    drain_pending: bool = False
    """Move queued user events into the log (they are processed now)."""
    answer_drained: bool = True
    """After a drain, queue a new run to answer what was drained (False flushes them)."""
    answer_after_interrupt: bool = False
    """With ``answer_drained`` False (a turn an interrupt ended): still queue a
    new run when something was queued after the interrupt (``_inbox.file_in``),
    so a message that redirects the agent is answered."""
    requeue_after: int | None = None
    """The run ends waiting for input, having stepped on the log up to this
    ``seq``: if input came after it (events that start work, logged while the run
    was live, so their accept queued no run), queue a new run for it, under the
    same lock, so nothing is left waiting."""
    since: int | None = None
    """When set, the write also returns the log after this ``seq`` as committed."""
    lease: LeaseTerms | None = None
    """A sandbox lease acquired or renewed first; ``SandboxLeaseEnded`` (the whole
    write undone) when it ended, ``LimitReached`` when a limit stops it. The ops
    this write starts record its placement."""
    then: Callable[[RunClaim, SessionRecord, Sequence[EventRecord]], RunWrite | None] | None = None
    """The turn's next write, worked out as ``ClaimTerms.plan`` works out a claim's
    first (from the session as this transaction reads it and the log after
    ``since``, which it needs, as this write leaves it) and made in this
    transaction when it returns one and the workspace's limits allow a model
    request: one commit less per step. What it logs and starts, and the lease it
    renews, are in the result; a lease that ended or a limit that stops it
    leaves the rest of that write made without it."""


@dataclass(frozen=True, slots=True)
class WriteResult:
    """What one ``run_write`` committed."""

    logged: list[EventRecord]
    next_run: str | None = None
    """After a drain, the run queued to answer what was drained."""
    log: list[EventRecord] | None = None
    """The session's log after ``RunWrite.since`` (None when not asked)."""
    started: dict[str, OpRecord | None] = field(default_factory=dict)
    """For each of ``ops_started``: the ledger's row as it was before this write
    (None: the op is new and now recorded as started)."""
    lease: SandboxLease | None = None
    """The sandbox lease as ``RunWrite.lease`` left it (None when not asked)."""


class RunLedger(Protocol):
    """The agent loop owns runs and the ledger; the API reads status (derived)."""

    async def start_run(self, session_id: str) -> str:
        """The session's live run, or a new queued one (idempotent)."""
        ...

    async def finish_run(self, run_id: str, status: RunStatus) -> None: ...
    async def claim_run(self, run_id: str, terms: ClaimTerms) -> RunStart | None:
        """Takes a queued run (None if another owner was first) and logs, in the same
        transaction, the events ``terms.opening(attempts)`` returns for it."""
        ...

    async def claim_next(self, session_id: str, terms: ClaimTerms) -> RunStart | None:
        """``claim_run`` of the session's oldest queued run; None when it has none."""
        ...

    async def renew_lease(self, run_id: str, epoch: int, lease_seconds: float) -> bool: ...
    async def requeue_runs(self, *, not_owned_by: str | None = None) -> list[tuple[str, str]]:
        """(run id, session id) of orphaned runs put back in the queue."""
        ...

    async def queued_runs(self, session_id: str | None = None) -> list[tuple[str, str]]:
        """(run id, session id) of queued runs, oldest first (of one session if named)."""
        ...

    async def run_write(self, claim: RunClaim, write: RunWrite) -> WriteResult:
        """One fenced transaction for ``claim`` (raises ``LeaseLost`` when stale;
        ``SandboxLeaseEnded`` or ``Conflict`` from ``write.lease``, writing nothing)."""
        ...
