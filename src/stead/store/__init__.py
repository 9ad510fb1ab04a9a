"""The store room: durable state behind the ``Store`` interface.

Other rooms import only from here. ``open_store`` picks the backend from the
database URL and brings the schema up to date before returning.
"""

from __future__ import annotations

from collections.abc import Callable

from anyio import to_thread

from stead.store import migrate
from stead.store.base import (
    LIVE_RUN_STATUSES,
    AgentRecord,
    ApiKey,
    ClaimTerms,
    EnvironmentRecord,
    EventFilter,
    EventRecord,
    EventsAccepted,
    IntegrityFinding,
    LeaseExpiry,
    LeaseTerms,
    NewEvent,
    OpRecord,
    Order,
    Page,
    PageRequest,
    RunClaim,
    RunStart,
    RunStatus,
    RunWrite,
    SandboxLease,
    SandboxLeaseStatus,
    SessionFilter,
    SessionRecord,
    Store,
    Workspace,
    WriteResult,
)
from stead.store.errors import (
    Conflict,
    InvalidValue,
    LeaseLost,
    NotFound,
    SandboxLeaseEnded,
    StoreError,
)
from stead.store.sql import SqlStore
from stead.store.sqlite import sqlite_engines
from stead.store.vaults import CredentialRecord, VaultRecord, VaultStore
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
    WorkToken,
)

__all__ = [
    "ENVIRONMENT_KEY_PREFIX",
    "LIVE_RUN_STATUSES",
    "NO_HEARTBEAT",
    "TOKEN_PREFIX",
    "AgentRecord",
    "ApiKey",
    "ClaimTerms",
    "Claimed",
    "Conflict",
    "CredentialRecord",
    "EnvironmentKey",
    "EnvironmentRecord",
    "EventFilter",
    "EventRecord",
    "EventsAccepted",
    "HeartbeatRefused",
    "IntegrityFinding",
    "InvalidValue",
    "LeaseExpiry",
    "LeaseLost",
    "LeaseTerms",
    "NewEvent",
    "NotFound",
    "OpRecord",
    "Order",
    "Page",
    "PageRequest",
    "QueueStats",
    "RunClaim",
    "RunStart",
    "RunStatus",
    "RunWrite",
    "SandboxLease",
    "SandboxLeaseEnded",
    "SandboxLeaseStatus",
    "SessionFilter",
    "SessionRecord",
    "SqlStore",
    "Store",
    "StoreError",
    "VaultRecord",
    "VaultStore",
    "WorkItem",
    "WorkState",
    "WorkToken",
    "Workspace",
    "WriteResult",
    "open_store",
    "open_store_sync",
]

READERS = 4


def open_store_sync(
    url: str,
    sqlite_synchronous: str = "FULL",
    before_commit: Callable[[], None] | None = None,
) -> SqlStore:
    """Opens the store and migrates it; blocking (use from the CLI or a thread).
    ``before_commit`` runs inside every write transaction (crash-test failpoints)."""
    if not url.startswith("sqlite"):
        raise ValueError(
            f"unsupported database URL {url!r}: this build of stead stores data in SQLite "
            "(sqlite:///path/to/stead.db)"
        )
    writer, reader = sqlite_engines(url, sqlite_synchronous, READERS)
    migrate.upgrade(writer)
    return SqlStore(writer, reader, readers=READERS, before_commit=before_commit)


async def open_store(
    url: str,
    sqlite_synchronous: str = "FULL",
    before_commit: Callable[[], None] | None = None,
) -> SqlStore:
    return await to_thread.run_sync(open_store_sync, url, sqlite_synchronous, before_commit)
