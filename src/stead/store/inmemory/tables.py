"""The in-memory store's rows: one ``Tables`` object that its functions read and
change as the SQL store's read and change a connection's tables.

Every value in a table is immutable (frozen rows, tuples, bytes), so a shallow
copy of each table is a snapshot: ``InMemoryStore`` takes one before each write
and puts it back when the write raises, which makes every write all or nothing.
JSON is held as the store's serialiser writes it (``dumps_checked``) and parsed
on every read, so no caller shares a dict with the store and a value the SQL
store would refuse (``InvalidValue``) is refused here too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from stead.jsonvalues import JsonValueError, dumps_checked
from stead.store.agents import AgentRecord
from stead.store.brains import BrainRecord
from stead.store.environments import EnvironmentRecord
from stead.store.errors import InvalidValue
from stead.store.events import EventRecord
from stead.store.files import FileRecord
from stead.store.leases import SandboxLease
from stead.store.memories import MemoryRecord, MemoryStoreRecord
from stead.store.paging import Page, PageRequest
from stead.store.runs import RunStatus
from stead.store.sessions import SessionRecord
from stead.store.skills import SkillRecord
from stead.store.vaults import CredentialRecord, VaultRecord
from stead.store.webhooks import WebhookAttempt, WebhookEndpoint
from stead.store.work import EnvironmentKey, WorkItem
from stead.store.workspaces import ApiKey, Workspace

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
D = TypeVar("D", bound="DataclassInstance")


def stored(value: Any) -> str:
    """``value`` as the store keeps it; ``InvalidValue`` when it cannot be read back."""
    try:
        return dumps_checked(value)
    except JsonValueError as exc:
        raise InvalidValue(exc.path, exc.reason) from None


def loaded(text: str) -> Any:
    return json.loads(text)


@dataclass(frozen=True, slots=True)
class Held(Generic[D]):
    """A record whose JSON fields are kept as text (``stored``) and parsed anew
    on every read (``record``), as the rows above keep theirs."""

    kept: D
    texts: tuple[tuple[str, str], ...]

    def record(self) -> D:
        return replace(self.kept, **{name: loaded(text) for name, text in self.texts})


def held(record: D, *json_fields: str) -> Held[D]:
    texts = tuple((name, stored(getattr(record, name))) for name in json_fields)
    return Held(replace(record, **dict.fromkeys(json_fields)), texts)


@dataclass(frozen=True, slots=True)
class AgentRow:
    id: str
    workspace_id: str
    latest_version: int
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None


@dataclass(frozen=True, slots=True)
class RepositoryRow:
    """A ``github_repository`` resource's private side (``session_repositories``)."""

    session_id: str
    workspace_id: str
    sealed_token: bytes | None
    cloned_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class VersionRow:
    definition: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class EnvironmentRow:
    id: str
    workspace_id: str
    name: str
    description: str | None
    config: str
    metadata: str
    scope: str | None
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None

    def record(self) -> EnvironmentRecord:
        return EnvironmentRecord(
            id=self.id,
            workspace_id=self.workspace_id,
            name=self.name,
            description=self.description,
            config=loaded(self.config),
            metadata=loaded(self.metadata),
            scope=self.scope,
            created_at=self.created_at,
            updated_at=self.updated_at,
            archived_at=self.archived_at,
        )


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: str
    workspace_id: str
    agent_id: str
    agent_version: int
    agent: str
    environment_id: str
    title: str | None
    metadata: str
    vault_ids: str
    budget: str
    resources: str
    usage: str
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None
    terminated_at: datetime | None
    pending_tail: int = 0
    interrupt_tail: int | None = None

    def record(self, status: str) -> SessionRecord:
        return SessionRecord(
            id=self.id,
            workspace_id=self.workspace_id,
            agent=loaded(self.agent),
            environment_id=self.environment_id,
            title=self.title,
            metadata=loaded(self.metadata),
            vault_ids=loaded(self.vault_ids),
            budget=loaded(self.budget),
            resources=loaded(self.resources),
            usage=loaded(self.usage),
            status=status,
            created_at=self.created_at,
            updated_at=self.updated_at,
            archived_at=self.archived_at,
            terminated_at=self.terminated_at,
        )


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event as a session's log or queue holds it (``body`` as text)."""

    id: str
    type: str
    body: str
    processed_at: datetime | None
    number: int
    """``seq`` in the log, ``position`` in the queue."""

    def record(self, session_id: str) -> EventRecord:
        body = loaded(self.body)
        if self.processed_at is None:
            return EventRecord(session_id, self.id, self.type, body, None, position=self.number)
        return EventRecord(session_id, self.id, self.type, body, self.processed_at, self.number)


@dataclass(frozen=True, slots=True)
class RunRow:
    id: str
    session_id: str
    status: RunStatus
    attempts: int
    epoch: int
    owner: str | None
    lease_until: datetime | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class OpRow:
    op_key: str
    session_id: str
    run_id: str
    kind: str
    status: str
    result: str
    epoch: int
    placement: int | None = None


@dataclass(frozen=True, slots=True)
class IdempotencyRow:
    fingerprint: str
    token: str
    created_at: datetime
    status: int | None = None
    content_type: str | None = None
    body: bytes | None = None


LedgerKey = tuple[str, date, str, str]
"""(workspace id, UTC day, session id or "", model or "")."""


@dataclass(frozen=True, slots=True)
class LedgerAmounts:
    counters: tuple[tuple[str, int], ...]
    active_seconds: float


@dataclass(frozen=True, slots=True)
class SandboxTime:
    workspace_id: str
    session_id: str | None
    active_seconds: float


@dataclass(frozen=True, slots=True)
class EndpointRow:
    endpoint: WebhookEndpoint
    sealed_secret: bytes


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    """A ``webhook_deliveries`` row, with its attempts (``webhook_attempts``)."""

    position: int
    id: str
    endpoint_id: str
    event_id: str
    event_type: str
    payload: str
    state: str
    attempts: int
    next_attempt_at: datetime
    claim_token: str | None
    created_at: datetime
    finished_at: datetime | None
    tries: tuple[WebhookAttempt, ...] = ()


@dataclass(frozen=True, slots=True)
class SkillVersionRow:
    skill_id: str
    version: str
    workspace_id: str
    name: str
    description: str
    file_id: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class MemoryVersionRow:
    """A ``memory_versions`` row, under its columns' names (``_memories.version_record``
    reads it as it reads the SQL row)."""

    id: str
    workspace_id: str
    memory_store_id: str
    memory_id: str
    operation: str
    created_at: datetime
    path: str | None = None
    content_sha256: str | None = None
    content_size_bytes: int | None = None
    blob_key: str | None = None
    actor_type: str | None = None
    actor_id: str | None = None
    embedding: bytes | None = None
    committed_at: datetime | None = None
    blob_released_at: datetime | None = None
    redacted_at: datetime | None = None
    redacted_by_type: str | None = None
    redacted_by_id: str | None = None


@dataclass(frozen=True, slots=True)
class MountRow:
    memory_id: str
    sha256: str
    workspace_id: str
    updated_at: datetime


@dataclass
class Tables:
    workspaces: dict[str, Workspace] = field(default_factory=dict)
    api_keys: dict[str, tuple[ApiKey, str]] = field(default_factory=dict)
    """Key id -> (key, SHA-256 of its secret)."""
    secrets: dict[str, bytes] = field(default_factory=dict)
    console_logouts: dict[str, datetime] = field(default_factory=dict)
    """SHA-256 of an ended console login's token -> when it would have expired."""
    agents: dict[str, AgentRow] = field(default_factory=dict)
    agent_versions: dict[tuple[str, int], VersionRow] = field(default_factory=dict)
    environments: dict[str, EnvironmentRow] = field(default_factory=dict)
    sessions: dict[str, SessionRow] = field(default_factory=dict)
    log: dict[str, tuple[LoggedEvent, ...]] = field(default_factory=dict)
    """Session id -> its events; the one of ``seq`` n is at index n - 1."""
    pending: dict[str, tuple[LoggedEvent, ...]] = field(default_factory=dict)
    runs: dict[str, RunRow] = field(default_factory=dict)
    """In creation order (ties of ``created_at`` keep it)."""
    ops: dict[str, OpRow] = field(default_factory=dict)
    leases: dict[str, SandboxLease] = field(default_factory=dict)
    sandbox_time: dict[str, SandboxTime] = field(default_factory=dict)
    ledger: dict[LedgerKey, LedgerAmounts] = field(default_factory=dict)
    idempotency: dict[tuple[str, str], IdempotencyRow] = field(default_factory=dict)
    files: dict[str, FileRecord] = field(default_factory=dict)
    outputs: dict[tuple[str, str, str], str] = field(default_factory=dict)
    """(session id, path, sha256) -> the file that captured that content."""
    limits: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """(workspace id, scope, name) -> value."""
    repositories: dict[str, RepositoryRow] = field(default_factory=dict)
    """Repository resource id -> its sealed token and clone state."""
    vaults: dict[str, Held[VaultRecord]] = field(default_factory=dict)
    credentials: dict[str, Held[CredentialRecord]] = field(default_factory=dict)
    """In creation order."""
    webhook_endpoints: dict[str, EndpointRow] = field(default_factory=dict)
    webhook_deliveries: dict[int, DeliveryRow] = field(default_factory=dict)
    """By ``position``, in its order."""
    counters: dict[str, int] = field(default_factory=dict)
    """The last number handed out of each sequence (``webhook_deliveries``)."""
    brains: dict[str, BrainRecord] = field(default_factory=dict)
    skills: dict[str, SkillRecord] = field(default_factory=dict)
    skill_versions: dict[tuple[str, str], SkillVersionRow] = field(default_factory=dict)
    memory_stores: dict[str, Held[MemoryStoreRecord]] = field(default_factory=dict)
    memories: dict[str, MemoryRecord] = field(default_factory=dict)
    memory_versions: dict[str, MemoryVersionRow] = field(default_factory=dict)
    session_memory_stores: dict[tuple[str, str], str] = field(default_factory=dict)
    """(session id, memory store id) -> workspace id."""
    memory_mounts: dict[tuple[str, str, str], MountRow] = field(default_factory=dict)
    """(session id, memory store id, path) -> the file's base."""
    work_items: dict[str, Held[WorkItem]] = field(default_factory=dict)
    work_tokens: dict[str, str] = field(default_factory=dict)
    """Work item id -> SHA-256 of its current claim's sessions token."""
    environment_keys: dict[str, tuple[EnvironmentKey, str]] = field(default_factory=dict)
    """Key id -> (key, SHA-256 of its secret)."""

    def next_number(self, sequence: str) -> int:
        self.counters[sequence] = number = self.counters.get(sequence, 0) + 1
        return number

    def snapshot(self) -> Tables:
        return Tables(**{f.name: dict(getattr(self, f.name)) for f in fields(self)})


def page_of(rows: Sequence[T], key: Callable[[T], tuple[Any, ...]], page: PageRequest) -> Page[T]:
    """``_paging.fetch_page`` over rows in memory: keyset paging on ``key``."""
    backward = page.before is not None
    ascending = (page.order == "asc") != backward
    chosen = list(rows)
    if page.after is not None:
        after = tuple(page.after)
        chosen = [r for r in chosen if (key(r) > after if page.order == "asc" else key(r) < after)]
    if page.before is not None:
        before = tuple(page.before)
        chosen = [
            r for r in chosen if (key(r) < before if page.order == "asc" else key(r) > before)
        ]
    chosen.sort(key=key, reverse=not ascending)
    more = len(chosen) > page.limit
    items = chosen[: page.limit]
    if backward:
        items.reverse()
        return Page(items=items, has_next=True, has_prev=more)
    return Page(items=items, has_next=more, has_prev=page.after is not None)


def agent_record(t: Tables, row: AgentRow, version: int) -> AgentRecord:
    found = t.agent_versions[(row.id, version)]
    return AgentRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        version=version,
        definition=loaded(found.definition),
        created_at=row.created_at,
        updated_at=found.created_at,
        archived_at=row.archived_at,
    )
