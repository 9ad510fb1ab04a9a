"""``LimitStore`` on the SQL store: each method one transaction of ``_limits.py``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from stead.store import _limits
from stead.store.limits import WORKSPACE, MonthUse

R = TypeVar("R")


class LimitMethods:
    """Mixed into ``SqlStore``, which provides ``_time``, ``_read`` and ``_write``."""

    def _time(self) -> datetime:
        raise NotImplementedError

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def limits(self, workspace_id: str, scope: str = WORKSPACE) -> dict[str, int]:
        return await self._read(_limits.read, workspace_id, scope)

    async def set_limits(
        self, workspace_id: str, scope: str, changes: dict[str, int | None]
    ) -> dict[str, int]:
        return await self._write(_limits.set_limits, workspace_id, scope, changes)

    async def month_use(self, workspace_id: str, *, now: datetime | None = None) -> MonthUse:
        return await self._read(_limits.month_use, now or self._time(), workspace_id)
