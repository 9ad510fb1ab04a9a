"""``AgentStore``: agents and their immutable versions (the narrow protocol and
its records; SQL in ``_agents.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from stead.jsonvalues import Json
from stead.store.paging import Page, PageRequest


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


AgentChange = Callable[[Json], Json]
"""Pure function from the latest agent definition to the new one; may raise."""


class AgentStore(Protocol):
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
