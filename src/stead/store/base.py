"""The Store interface and the records it returns.

Records are frozen dataclasses; JSON-shaped parts (agent definitions, configs,
event bodies) stay plain dicts in wire form. Every method is async, may raise
``NotFound`` or ``Conflict`` (see ``errors.py``), and commits before it
returns: a returned write is durable.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

from stead.jsonvalues import Json
from stead.store.brains import BrainStore
from stead.store.files import FileStore
from stead.store.idempotency import IdempotencyStore
from stead.store.leases import LeaseStore, LeaseTerms
from stead.store.limits import LimitStore
from stead.store.memories import MemoryStoreStore
from stead.store.resources import SessionResourceStore
from stead.store.skills import SkillStore
from stead.store.usage import RequestUsage, UsageStore
from stead.store.vaults import VaultStore
from stead.store.webhooks import WebhookStore
from stead.store.work import WorkStore

T = TypeVar("T")
Order = Literal["asc", "desc"]


class RunStatus(enum.StrEnum):
    """Lifecycle of one turn. Session status is derived from it (DESIGN rule 2)."""

    QUEUED = "queued"
    RUNNING = "running"
    RETRYING = "retrying"
    DONE = "done"
    FAILED = "failed"


LIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)


@dataclass(frozen=True, slots=True)
class Workspace:
    id: str
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    workspace_id: str
    name: str
    hint: str
    created_at: datetime
    revoked_at: datetime | None = None
    admin: bool = False
    """An operator's key: it may also use the admin routes."""


@dataclass(frozen=True, slots=True)
class AgentRecord:
    id: str
    workspace_id: str
    version: int
    definition: Json
    """name, description, system, model, tools, mcp_servers, skills, multiagent,
    execution_identity, metadata — already in resolved wire form."""
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None


@dataclass(frozen=True, slots=True)
class EnvironmentRecord:
    id: str
    workspace_id: str
    name: str
    description: str | None
    config: Json
    metadata: dict[str, str]
    scope: str | None
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None


@dataclass(frozen=True, slots=True)
class SessionRecord:
    id: str
    workspace_id: str
    agent: Json
    environment_id: str
    title: str | None
    metadata: dict[str, str]
    vault_ids: list[str]
    budget: Json | None
    resources: list[Json]
    usage: Json
    status: str
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None
    terminated_at: datetime | None


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One session event. ``seq`` is None while the event waits in the pending queue."""

    session_id: str
    id: str
    type: str
    body: Json
    processed_at: datetime | None
    seq: int | None = None
    position: int | None = None
    """Place in the pending queue while ``seq`` is None."""


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append; the store assigns ``seq`` and stamps ``processed_at``."""

    id: str
    type: str
    body: Json


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


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One side effect in the ledger: ``started``, or ``completed`` with its result."""

    op_key: str
    run_id: str
    kind: str
    status: str
    result: Any
    epoch: int


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
    drain_pending: bool = False
    """Move queued user events into the log (they are processed now)."""
    answer_drained: bool = True
    """After a drain, queue a new run to answer what was drained (False flushes them)."""
    since: int | None = None
    """When set, the write also returns the log after this ``seq`` as committed."""
    lease: LeaseTerms | None = None
    """A sandbox lease acquired or renewed first; ``SandboxLeaseEnded`` (the whole
    write undone) when it ended, ``LimitReached`` when a limit stops it."""


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


@dataclass(frozen=True, slots=True)
class PageRequest:
    """Keyset paging: ``after``/``before`` are the sort key of the cursor row."""

    limit: int
    order: Order
    after: tuple[Any, ...] | None = None
    before: tuple[Any, ...] | None = None


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    items: list[T]
    has_next: bool
    has_prev: bool


@dataclass(frozen=True, slots=True)
class SessionFilter:
    agent_id: str | None = None
    agent_version: int | None = None
    created_gt: datetime | None = None
    created_gte: datetime | None = None
    created_lt: datetime | None = None
    created_lte: datetime | None = None
    include_archived: bool = False
    statuses: Sequence[str] = ()
    deployment_id: str | None = None
    memory_store_id: str | None = None


@dataclass(frozen=True, slots=True)
class EventFilter:
    types: Sequence[str] = ()
    processed_gt: datetime | None = None
    processed_gte: datetime | None = None
    processed_lt: datetime | None = None
    processed_lte: datetime | None = None

    @property
    def has_time_bounds(self) -> bool:
        return any((self.processed_gt, self.processed_gte, self.processed_lt, self.processed_lte))


@dataclass(frozen=True, slots=True)
class EventsAccepted:
    """What ``accept_user_events`` did: the echoes, and which of them went to the log."""

    echoes: list[EventRecord] = field(default_factory=list)
    logged: list[EventRecord] = field(default_factory=list)
    starts_work: bool = False
    """A run was queued for what was logged: the agent loop has work."""
    started: RunStart | None = None
    """The queued run, already claimed on the terms the caller gave."""


AgentChange = Callable[[Json], Json]
"""Pure function from the latest agent definition to the new one; may raise."""
EnvironmentChange = Callable[[EnvironmentRecord], dict[str, Any]]
SessionChange = Callable[[SessionRecord], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class IntegrityFinding:
    """One problem ``stead db check`` found: where, what (``repaired``: rewritten by this run)."""

    where: str
    problem: str
    repaired: bool = False

    def __str__(self) -> str:
        done = " (repaired)" if self.repaired else ""
        return f"{self.where}: {self.problem}{done}"


class Store(
    LeaseStore,
    VaultStore,
    WorkStore,
    UsageStore,
    BrainStore,
    FileStore,
    IdempotencyStore,
    LimitStore,
    SessionResourceStore,
    SkillStore,
    WebhookStore,
    MemoryStoreStore,
    Protocol,
):
    """Durable state of a stead installation. Safe to share between tasks."""

    async def close(self) -> None: ...

    # workspaces and keys
    async def create_workspace(self, name: str) -> Workspace: ...
    async def list_workspaces(self) -> list[Workspace]: ...
    async def create_api_key(
        self, workspace_id: str, name: str, *, admin: bool = False
    ) -> tuple[ApiKey, str]:
        """Returns the key record and the secret, which is never stored in clear."""
        ...

    async def authenticate(self, secret: str) -> ApiKey | None: ...
    async def count_api_keys(self) -> int: ...
    async def list_api_keys(self) -> list[ApiKey]:
        """Every key of every workspace, revoked ones too, oldest first."""
        ...

    async def revoke_api_key(self, key_id: str) -> ApiKey:
        """The key stops authenticating (servers that verified it recently trust it
        for at most ``STEAD_AUTH_CACHE_SECONDS`` more). ``NotFound`` if unknown."""
        ...

    async def installation_secret(self, name: str) -> bytes:
        """32 random bytes kept for this installation under ``name`` (made on first use),
        the same for every process that opens the store."""
        ...

    async def check_integrity(self, repair: bool) -> list[IntegrityFinding]:
        """What ``stead db check`` reports; with ``repair``, unrenderable JSON is rewritten."""
        ...

    # agents
    async def create_agent(self, workspace_id: str, definition: Json) -> AgentRecord: ...
    async def get_agent(
        self, workspace_id: str, agent_id: str, version: int | None = None
    ) -> AgentRecord: ...
    async def update_agent(
        self, workspace_id: str, agent_id: str, expected_version: int | None, change: AgentChange
    ) -> AgentRecord:
        """Applies ``change`` to the latest version; a no-op change makes no new version.
        ``expected_version`` mismatch raises Conflict."""
        ...

    async def archive_agent(self, workspace_id: str, agent_id: str) -> AgentRecord: ...
    async def list_agents(
        self,
        workspace_id: str,
        page: PageRequest,
        include_archived: bool,
        created_gte: datetime | None,
        created_lte: datetime | None,
    ) -> Page[AgentRecord]: ...
    async def list_agent_versions(
        self, workspace_id: str, agent_id: str, page: PageRequest
    ) -> Page[AgentRecord]: ...

    # environments
    async def create_environment(
        self,
        workspace_id: str,
        name: str,
        description: str | None,
        config: Json,
        metadata: dict[str, str],
        scope: str | None,
    ) -> EnvironmentRecord: ...
    async def get_environment(self, workspace_id: str, env_id: str) -> EnvironmentRecord: ...
    async def update_environment(
        self, workspace_id: str, env_id: str, change: EnvironmentChange
    ) -> EnvironmentRecord: ...
    async def archive_environment(self, workspace_id: str, env_id: str) -> EnvironmentRecord: ...
    async def delete_environment(self, workspace_id: str, env_id: str) -> None: ...
    async def list_environments(
        self, workspace_id: str, page: PageRequest, include_archived: bool
    ) -> Page[EnvironmentRecord]: ...

    # sessions
    async def create_session(
        self,
        workspace_id: str,
        agent_ref: tuple[str, int | None],
        build_agent: Callable[[AgentRecord], Json],
        environment_id: str,
        fields: dict[str, Any],
        initial_events: Sequence[NewEvent],
    ) -> tuple[SessionRecord, list[EventRecord]]:
        """Resolves the agent reference, snapshots it through ``build_agent`` and
        appends ``initial_events``, all in one transaction."""
        ...

    async def get_session(self, workspace_id: str, session_id: str) -> SessionRecord: ...
    async def update_session(
        self, workspace_id: str, session_id: str, change: SessionChange, event: NewEvent
    ) -> tuple[SessionRecord, EventRecord | None]:
        """Applies ``change``; when it changed anything, appends ``event`` with the
        changed columns merged into its body (they are named like the wire fields)."""
        ...

    async def archive_session(self, workspace_id: str, session_id: str) -> SessionRecord: ...
    async def delete_session(self, workspace_id: str, session_id: str) -> None: ...
    async def list_sessions(
        self, workspace_id: str, page: PageRequest, where: SessionFilter
    ) -> Page[SessionRecord]: ...

    # events
    async def accept_user_events(
        self,
        workspace_id: str,
        session_id: str,
        events: Sequence[NewEvent],
        validate: Callable[[SessionRecord, Callable[[str], EventRecord | None]], None],
        claim: ClaimTerms | None = None,
    ) -> EventsAccepted:
        """Stores user events: into the log when the session has no live run,
        else into the pending queue (``processed_at`` None). ``validate`` sees the
        session and a lookup of logged events by id, inside the transaction.
        With ``claim``, a run queued for the events is also claimed on those
        terms in the same transaction (``EventsAccepted.started``)."""
        ...

    async def append_events(
        self, session_id: str, events: Sequence[NewEvent]
    ) -> list[EventRecord]: ...
    async def drain_pending(self, session_id: str) -> list[EventRecord]:
        """Moves every pending event into the log, in arrival order."""
        ...

    async def list_events(
        self, workspace_id: str, session_id: str, page: PageRequest, where: EventFilter
    ) -> Page[EventRecord]: ...
    async def events_after(self, session_id: str, seq: int, limit: int) -> list[EventRecord]: ...
    async def last_seq(self, session_id: str) -> int: ...
    async def find_event_seq(self, session_id: str, event_id: str) -> int | None: ...

    # runs and the side-effect ledger (the agent loop owns them; the API reads status)
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

    async def session_snapshot(self, session_id: str) -> SessionRecord:
        """The session regardless of workspace (the agent loop acts for its owner)."""
        ...

    async def terminate_session(
        self, workspace_id: str, session_id: str, events: Sequence[NewEvent]
    ) -> list[EventRecord]:
        """Ends an idle session for good: logs ``events`` and
        ``session.status_terminated`` and sets ``terminated_at``. ``Conflict`` when
        it is running (interrupt it first), archived, or already terminated."""
        ...
