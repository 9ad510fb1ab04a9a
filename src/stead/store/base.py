"""The Store interface: the union of the aggregates' narrow protocols.

Each aggregate has a module of its own with its protocol and records
(``workspaces.py``, ``agents.py``, ``environments.py``, ``sessions.py``,
``events.py``, ``runs.py``, ``leases.py``, ...); a room depends on the ones it
uses, and the whole ``Store`` only where the whole is wired (the app factory,
the service). The records are also importable from here.

Records are frozen dataclasses; JSON-shaped parts (agent definitions, configs,
event bodies) stay plain dicts in wire form. Every method is async, may raise
``NotFound`` or ``Conflict`` (see ``errors.py``), and commits before it
returns: a returned write is durable.
"""

from __future__ import annotations

from typing import Protocol

from stead.store.agents import AgentChange, AgentRecord, AgentStore
from stead.store.brains import BrainStore
from stead.store.environments import EnvironmentChange, EnvironmentRecord, EnvironmentStore
from stead.store.events import (
    EventCursor,
    EventFilter,
    EventLog,
    EventRecord,
    EventsAccepted,
    NewEvent,
    event_cursor_keys,
)
from stead.store.files import FileStore
from stead.store.idempotency import IdempotencyStore
from stead.store.leases import LeaseStore
from stead.store.limits import LimitStore
from stead.store.memories import MemoryStoreStore
from stead.store.paging import Order, Page, PageRequest
from stead.store.resources import SessionResourceStore
from stead.store.runs import (
    LIVE_RUN_STATUSES,
    ClaimTerms,
    OpRecord,
    RunClaim,
    RunLedger,
    RunStart,
    RunStatus,
    RunWrite,
    WriteResult,
)
from stead.store.sessions import SessionChange, SessionFilter, SessionRecord, SessionStore
from stead.store.skills import SkillStore
from stead.store.usage import UsageStore
from stead.store.vaults import VaultStore
from stead.store.webhooks import WebhookStore
from stead.store.work import WorkStore
from stead.store.workspaces import ApiKey, IntegrityFinding, Workspace, WorkspaceStore

__all__ = [
    "LIVE_RUN_STATUSES",
    "AgentChange",
    "AgentRecord",
    "ApiKey",
    "ClaimTerms",
    "EnvironmentChange",
    "EnvironmentRecord",
    "EventCursor",
    "EventFilter",
    "EventRecord",
    "EventsAccepted",
    "IntegrityFinding",
    "NewEvent",
    "OpRecord",
    "Order",
    "Page",
    "PageRequest",
    "RunClaim",
    "RunStart",
    "RunStatus",
    "RunWrite",
    "SessionChange",
    "SessionFilter",
    "SessionRecord",
    "Store",
    "Workspace",
    "WriteResult",
    "event_cursor_keys",
]


class Store(
    WorkspaceStore,
    AgentStore,
    EnvironmentStore,
    SessionStore,
    EventLog,
    RunLedger,
    LeaseStore,
    UsageStore,
    IdempotencyStore,
    SessionResourceStore,
    FileStore,
    LimitStore,
    VaultStore,
    WorkStore,
    BrainStore,
    SkillStore,
    WebhookStore,
    MemoryStoreStore,
    Protocol,
):
    """Durable state of a stead installation. Safe to share between tasks.
    ``SqlStore`` and the in-memory fake ``InMemoryStore`` implement all of it."""

    async def close(self) -> None: ...
