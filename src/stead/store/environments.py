"""``EnvironmentStore``: environments, unique by name within a workspace (the
narrow protocol and its records; SQL in ``_environments.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from stead.jsonvalues import Json
from stead.store.paging import Page, PageRequest


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


EnvironmentChange = Callable[[EnvironmentRecord], dict[str, Any]]


class EnvironmentStore(Protocol):
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
