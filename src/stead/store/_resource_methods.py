"""``SessionResourceStore`` on the SQL store: each method one transaction of ``_resources.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from stead.jsonvalues import Json
from stead.store import _resources
from stead.store.files import FileRecord, NewFile

R = TypeVar("R")


class ResourceMethods:
    """Mixed into ``SqlStore``, which provides ``_write``."""

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def add_session_resource(
        self, workspace_id: str, session_id: str, resource: Json, *, limit: int
    ) -> Json:
        return await self._write(_resources.add, workspace_id, session_id, resource, limit)

    async def delete_session_resource(
        self, workspace_id: str, session_id: str, resource_id: str
    ) -> Json:
        return await self._write(_resources.delete, workspace_id, session_id, resource_id)

    async def begin_output(
        self, new: NewFile, session_id: str, path: str, sha256: str, *, quota: int = 0
    ) -> FileRecord | None:
        return await self._write(_resources.begin_output, new, session_id, path, sha256, quota)
