"""``SessionStore``: sessions, whose status is derived from ``terminated_at`` and
their runs, never stored (the narrow protocol and its records; SQL in
``_sessions.py``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from stead.jsonvalues import Json
from stead.store.agents import AgentRecord
from stead.store.events import EventRecord, NewEvent
from stead.store.paging import Page, PageRequest


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


SessionChange = Callable[[SessionRecord], dict[str, Any]]


class SessionStore(Protocol):
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

    async def archive_session(
        self, workspace_id: str, session_id: str
    ) -> tuple[SessionRecord, list[EventRecord]]:
        """Makes an idle session read-only (archiving again changes nothing), and
        the events it logged: what waited in its queue (at the budget's pause),
        logged unanswered, as ``terminate_session`` logs it. ``Conflict`` when it
        is running (interrupt it first)."""
        ...

    async def delete_session(self, workspace_id: str, session_id: str) -> None: ...
    async def list_sessions(
        self, workspace_id: str, page: PageRequest, where: SessionFilter
    ) -> Page[SessionRecord]: ...
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
