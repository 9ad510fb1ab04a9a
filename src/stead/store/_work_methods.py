"""``WorkStore`` on the SQL store: each method one transaction of ``_work.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from stead.store import _work
from stead.store.base import Page, PageRequest
from stead.store.work import Claimed, EnvironmentKey, QueueStats, WorkItem, WorkToken

R = TypeVar("R")


class WorkMethods:
    """Mixed into ``SqlStore``, which provides ``_write`` and ``_read``."""

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def create_environment_key(
        self, workspace_id: str, environment_id: str
    ) -> tuple[EnvironmentKey, str]:
        return await self._write(_work.create_environment_key, workspace_id, environment_id)

    async def revoke_environment_key(
        self, workspace_id: str, environment_id: str, key_id: str
    ) -> EnvironmentKey:
        return await self._write(_work.revoke_environment_key, workspace_id, environment_id, key_id)

    async def authenticate_environment_key(self, secret: str) -> EnvironmentKey | None:
        return await self._read(_work.authenticate_environment_key, secret)

    async def authenticate_work_token(self, secret: str) -> WorkToken | None:
        return await self._read(_work.authenticate_work_token, secret)

    async def ensure_work_item(
        self, workspace_id: str, environment_id: str, session_id: str, ttl_seconds: float
    ) -> WorkItem | None:
        return await self._write(
            _work.ensure_work_item, workspace_id, environment_id, session_id, ttl_seconds
        )

    async def poll_work(
        self,
        workspace_id: str,
        environment_id: str,
        worker_id: str | None,
        reclaim_after: float,
        key_id: str | None = None,
    ) -> Claimed | None:
        return await self._write(
            _work.poll_work, workspace_id, environment_id, worker_id, reclaim_after, key_id
        )

    async def ack_work(self, workspace_id: str, environment_id: str, work_id: str) -> WorkItem:
        return await self._write(_work.ack_work, workspace_id, environment_id, work_id)

    async def heartbeat_work(
        self,
        workspace_id: str,
        environment_id: str,
        work_id: str,
        expected: str | None,
        ttl_seconds: float,
        epoch: int | None,
    ) -> tuple[WorkItem, bool]:
        return await self._write(
            _work.heartbeat_work,
            workspace_id,
            environment_id,
            work_id,
            expected,
            ttl_seconds,
            epoch,
        )

    async def stop_work(
        self, workspace_id: str, environment_id: str, work_id: str, force: bool
    ) -> WorkItem:
        return await self._write(_work.stop_work, workspace_id, environment_id, work_id, force)

    async def latest_work(self, session_id: str) -> WorkItem | None:
        return await self._read(_work.latest_work, session_id)

    async def settled_work(self, work_id: str, epoch: int) -> None:
        await self._write(_work.settled_work, work_id, epoch)

    async def get_work(self, workspace_id: str, environment_id: str, work_id: str) -> WorkItem:
        return await self._read(_work.get_work, workspace_id, environment_id, work_id)

    async def update_work_metadata(
        self, workspace_id: str, environment_id: str, work_id: str, patch: dict[str, Any]
    ) -> WorkItem:
        return await self._write(
            _work.update_work_metadata, workspace_id, environment_id, work_id, patch
        )

    async def list_work(
        self, workspace_id: str, environment_id: str, page: PageRequest
    ) -> Page[WorkItem]:
        return await self._read(_work.list_work, workspace_id, environment_id, page)

    async def work_stats(self, workspace_id: str, environment_id: str) -> QueueStats:
        return await self._read(_work.work_stats, workspace_id, environment_id)
