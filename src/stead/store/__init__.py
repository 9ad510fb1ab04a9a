"""The store room: durable state behind the ``Store`` interface.

Other rooms import only from here. ``open_store`` picks the backend from the
database URL (``sqlite:///path`` or ``postgresql://...``) and brings the schema
up to date before returning; a database it cannot open raises ``StoreUnavailable``
with one line to show the operator.

``Store`` is the union of one narrow protocol per aggregate, each in a module
with its records: ``WorkspaceStore`` (workspaces, keys, installation secrets,
integrity), ``AgentStore``, ``EnvironmentStore``, ``SessionStore``, ``EventLog``
(the log and the pending queue), ``RunLedger`` (runs, claims, fenced writes, the
op ledger), ``LeaseStore``, ``UsageStore``, ``IdempotencyStore``, ``FileStore``,
``SessionResourceStore``, ``LimitStore``, ``VaultStore``, ``WorkStore``,
``BrainStore``, ``SkillStore``, ``WebhookStore`` and ``MemoryStoreStore``. A room
takes the ones it uses. ``SqlStore`` and ``InMemoryStore`` (the fake,
imported by name from ``stead.store.inmemory``: a server never loads it) each
implement the whole ``Store``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from anyio import to_thread
from sqlalchemy import Engine
from sqlalchemy.exc import DatabaseError

from stead.store import migrate
from stead.store.agents import AgentStore
from stead.store.base import (
    LIVE_RUN_STATUSES,
    AgentRecord,
    ApiKey,
    ClaimTerms,
    EnvironmentRecord,
    EventCursor,
    EventFilter,
    EventRecord,
    EventsAccepted,
    IntegrityFinding,
    NewEvent,
    OpRecord,
    Order,
    Page,
    PageRequest,
    RunClaim,
    RunStart,
    RunStatus,
    RunWrite,
    SessionFilter,
    SessionRecord,
    Store,
    Workspace,
    WriteResult,
    event_cursor_keys,
)
from stead.store.brains import BrainRecord, BrainStore
from stead.store.channel import Channel, open_channel
from stead.store.environments import EnvironmentStore
from stead.store.errors import (
    BudgetReached,
    ChannelDown,
    Conflict,
    DatabaseBusy,
    InvalidValue,
    LeaseLost,
    LimitReached,
    NotFound,
    SandboxLeaseEnded,
    StaleSecretKey,
    StorageQuotaExceeded,
    StoreError,
    StoreUnavailable,
)
from stead.store.events import EventLog
from stead.store.files import FileRecord, FileScope, FileStore, NewFile
from stead.store.idempotency import (
    ClaimState,
    IdempotencyClaim,
    IdempotencyKeyHeld,
    IdempotencyStore,
    KeyClaim,
    not_claiming,
)
from stead.store.leases import (
    LeaseExpiry,
    LeaseHost,
    LeaseStore,
    LeaseTerms,
    SandboxLease,
    SandboxLeaseStatus,
)
from stead.store.limits import (
    ENVIRONMENT_LIMITS,
    WORKSPACE,
    WORKSPACE_LIMITS,
    LimitStore,
    MonthUse,
)
from stead.store.memories import (
    MOUNT_MOVED,
    PATH_CONFLICT,
    PRECONDITION_FAILED,
    Actor,
    MemoryListing,
    MemoryPrefix,
    MemoryRecord,
    MemoryStoreRecord,
    MemoryStoreStore,
    MemoryVector,
    MemoryVersionRecord,
    MemoryWrite,
    MountBase,
    MountClaim,
    NewVersion,
    StoreFilter,
    VersionFilter,
    precondition_failed,
    store_archived,
)
from stead.store.migrate import SchemaState, SchemaStatus
from stead.store.resources import RepositoryState, SessionResourceStore
from stead.store.runs import STARTS_WORK, RunLedger
from stead.store.sessions import SessionStore
from stead.store.skills import (
    SKILL_SCOPE,
    NewSkillVersion,
    SkillRecord,
    SkillStore,
    SkillVersionRecord,
    skill_name_changed,
    skill_name_taken,
)
from stead.store.sql import SqlStore
from stead.store.sqlite import sqlite_engines
from stead.store.usage import LedgerRow, RequestUsage, UsageStore
from stead.store.vaults import CredentialRecord, VaultRecord, VaultStore
from stead.store.webhooks import (
    AttemptResult,
    DeliveryState,
    DueDelivery,
    RetryTerms,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookStore,
    WorkspaceScope,
)
from stead.store.work import (
    ENVIRONMENT_KEY_PREFIX,
    NO_HEARTBEAT,
    TOKEN_PREFIX,
    Claimed,
    EnvironmentKey,
    HeartbeatRefused,
    QueueStats,
    WorkItem,
    WorkState,
    WorkStore,
    WorkToken,
)
from stead.store.workspaces import WorkspaceStore

__all__ = [
    "ENVIRONMENT_KEY_PREFIX",
    "ENVIRONMENT_LIMITS",
    "LIVE_RUN_STATUSES",
    "MOUNT_MOVED",
    "NO_HEARTBEAT",
    "PATH_CONFLICT",
    "PRECONDITION_FAILED",
    "SKILL_SCOPE",
    "STARTS_WORK",
    "TOKEN_PREFIX",
    "WORKSPACE",
    "WORKSPACE_LIMITS",
    "Actor",
    "AgentRecord",
    "AgentStore",
    "ApiKey",
    "AttemptResult",
    "BrainRecord",
    "BrainStore",
    "BudgetReached",
    "Channel",
    "ChannelDown",
    "ClaimState",
    "ClaimTerms",
    "Claimed",
    "Conflict",
    "CredentialRecord",
    "DatabaseBusy",
    "DeliveryState",
    "DueDelivery",
    "EnvironmentKey",
    "EnvironmentRecord",
    "EnvironmentStore",
    "EventCursor",
    "EventFilter",
    "EventLog",
    "EventRecord",
    "EventsAccepted",
    "FileRecord",
    "FileScope",
    "FileStore",
    "HeartbeatRefused",
    "IdempotencyClaim",
    "IdempotencyKeyHeld",
    "IdempotencyStore",
    "IntegrityFinding",
    "InvalidValue",
    "KeyClaim",
    "LeaseExpiry",
    "LeaseHost",
    "LeaseLost",
    "LeaseStore",
    "LeaseTerms",
    "LedgerRow",
    "LimitReached",
    "LimitStore",
    "MemoryListing",
    "MemoryPrefix",
    "MemoryRecord",
    "MemoryStoreRecord",
    "MemoryStoreStore",
    "MemoryVector",
    "MemoryVersionRecord",
    "MemoryWrite",
    "MonthUse",
    "MountBase",
    "MountClaim",
    "NewEvent",
    "NewFile",
    "NewSkillVersion",
    "NewVersion",
    "NotFound",
    "OpRecord",
    "Order",
    "Page",
    "PageRequest",
    "QueueStats",
    "RepositoryState",
    "RequestUsage",
    "RetryTerms",
    "RunClaim",
    "RunLedger",
    "RunStart",
    "RunStatus",
    "RunWrite",
    "SandboxLease",
    "SandboxLeaseEnded",
    "SandboxLeaseStatus",
    "SchemaState",
    "SchemaStatus",
    "SessionFilter",
    "SessionRecord",
    "SessionResourceStore",
    "SessionStore",
    "SkillRecord",
    "SkillStore",
    "SkillVersionRecord",
    "SqlStore",
    "StaleSecretKey",
    "StorageQuotaExceeded",
    "Store",
    "StoreError",
    "StoreFilter",
    "StoreUnavailable",
    "UsageStore",
    "VaultRecord",
    "VaultStore",
    "VersionFilter",
    "WebhookAttempt",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WebhookStore",
    "WorkItem",
    "WorkState",
    "WorkStore",
    "WorkToken",
    "Workspace",
    "WorkspaceScope",
    "WorkspaceStore",
    "WriteResult",
    "event_cursor_keys",
    "not_claiming",
    "open_channel",
    "open_store",
    "open_store_sync",
    "precondition_failed",
    "schema_status_sync",
    "shown_url",
    "single_brain",
    "skill_name_changed",
    "skill_name_taken",
    "store_archived",
]

READERS = 4
POSTGRES_WRITERS = 4
DATABASE_WAIT_SECONDS = 10.0
"""Default of ``Settings.database_wait_seconds``."""
OPEN_ERRORS = (DatabaseError, sqlite3.Error)
"""What opening a database may raise when it cannot be used now. SQLite's own
errors come unwrapped from the ``BEGIN`` its engines send themselves
(``sqlite.py``): "database is locked" when another process holds a write
transaction past the busy timeout."""


def open_store_sync(
    url: str,
    sqlite_synchronous: str = "FULL",
    before_commit: Callable[[], None] | None = None,
    wait_seconds: float = DATABASE_WAIT_SECONDS,
) -> SqlStore:
    """Opens the store and migrates it; blocking (use from the CLI or a thread).
    ``before_commit`` runs inside every write transaction (crash-test failpoints);
    a call that waited ``wait_seconds`` for a connection fails with ``DatabaseBusy``."""
    writer, reader = _engines(url, sqlite_synchronous)
    writers = 1 if single_brain(url) else POSTGRES_WRITERS
    try:
        migrate.upgrade(writer)
    except StoreUnavailable:
        _dispose(writer, reader)
        raise
    except OPEN_ERRORS as exc:  # unreachable, locked, or not a database (a corrupt file)
        _dispose(writer, reader)
        raise StoreUnavailable(f"cannot open {shown_url(url)}: {_first_line(exc)}") from None
    return SqlStore(
        writer,
        reader,
        readers=READERS,
        writers=writers,
        before_commit=before_commit,
        wait_seconds=wait_seconds,
    )


def schema_status_sync(url: str) -> migrate.SchemaStatus:
    """Where the database at ``url`` stands against this stead's migrations,
    without migrating or writing anything; blocking (for the CLI)."""
    writer, reader = _engines(url, "FULL")
    try:
        return migrate.status(writer)
    except OPEN_ERRORS as exc:  # unreachable, locked, or not a database (a corrupt file)
        raise StoreUnavailable(f"cannot open {shown_url(url)}: {_first_line(exc)}") from None
    finally:
        _dispose(writer, reader)


def _engines(url: str, sqlite_synchronous: str) -> tuple[Engine, Engine]:
    if single_brain(url):
        return sqlite_engines(url, sqlite_synchronous, READERS)
    return _postgres_engines(url)


def single_brain(url: str) -> bool:
    """True for SQLite, whose database one ``stead serve`` owns (under the data
    directory's lock); False for PostgreSQL, which several may share."""
    return url.startswith("sqlite")


def _postgres_engines(url: str) -> tuple[Engine, Engine]:
    # Imported here: a SQLite server never loads the PostgreSQL driver.
    from stead.store import postgres

    if not postgres.is_postgres(url):
        raise StoreUnavailable(
            f"unsupported database URL {shown_url(url)}: stead stores data in SQLite "
            "(sqlite:///path/to/stead.db) or PostgreSQL (postgresql://user@host/db)"
        )
    return postgres.postgres_engines(url, POSTGRES_WRITERS, READERS)


def shown_url(url: str) -> str:
    """The database URL as it may be printed: a PostgreSQL one without its password."""
    if url.startswith("sqlite"):
        return url
    from stead.store import postgres

    return postgres.shown(url)


def _first_line(exc: DatabaseError | sqlite3.Error) -> str:
    cause = exc.orig if isinstance(exc, DatabaseError) and exc.orig is not None else exc
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    return lines[0] if lines else type(cause).__name__


def _dispose(*engines: Engine) -> None:
    for engine in engines:
        engine.dispose()


async def open_store(
    url: str,
    sqlite_synchronous: str = "FULL",
    before_commit: Callable[[], None] | None = None,
    wait_seconds: float = DATABASE_WAIT_SECONDS,
) -> SqlStore:
    return await to_thread.run_sync(
        open_store_sync, url, sqlite_synchronous, before_commit, wait_seconds
    )
