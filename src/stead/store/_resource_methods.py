"""``SessionResourceStore`` on the SQL store: each method one transaction of ``_resources.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from stead.jsonvalues import Json
from stead.store import _repositories, _resources
from stead.store.files import FileRecord, NewFile
from stead.store.resources import RepositoryState

R = TypeVar("R")


class ResourceMethods:
    """Mixed into ``SqlStore``, which provides ``_write`` and ``_read``."""

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def add_session_resource(
        self,
        workspace_id: str,
        session_id: str,
        resource: Json,
        *,
        limit: int,
        sealed_token: bytes | None = None,
    ) -> Json:
        return await self._write(
            _resources.add, workspace_id, session_id, resource, limit, sealed_token
        )

    async def delete_session_resource(
        self, workspace_id: str, session_id: str, resource_id: str
    ) -> Json:
        return await self._write(_resources.delete, workspace_id, session_id, resource_id)

    async def set_repository_token(
        self, workspace_id: str, session_id: str, resource_id: str, sealed: bytes, stamp: str
    ) -> Json:
        return await self._write(
            _repositories.set_token, workspace_id, session_id, resource_id, sealed, stamp
        )

    async def repository_states(self, session_id: str) -> list[RepositoryState]:
        return await self._read(_repositories.states, session_id)

    async def mark_repository_cloned(self, resource_id: str) -> None:
        await self._write(_repositories.mark_cloned, resource_id)

    async def reseal_repository_tokens(self, reseal: Callable[[str, bytes], bytes | None]) -> int:
        return await self._write(_repositories.reseal, reseal)

    async def begin_output(
        self, new: NewFile, session_id: str, path: str, sha256: str, *, quota: int = 0
    ) -> FileRecord | None:
        return await self._write(_resources.begin_output, new, session_id, path, sha256, quota)
