"""``LeaseStore`` on the SQL store: each method one transaction of ``_leases.py``
(or ``_usage.py`` for sandbox time; ``_limits.py`` for an acquire within limits)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from stead.store import _leases, _limits, _usage
from stead.store.leases import LeaseExpiry, LeaseHost, SandboxLease

R = TypeVar("R")


class LeaseMethods:
    """Mixed into ``SqlStore``, which provides ``_read``, ``_write`` and ``_write_at``."""

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _write_at(self, now: datetime | None, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def acquire_sandbox_lease(
        self,
        sandbox_id: str,
        *,
        workspace_id: str,
        session_id: str | None,
        environment_id: str,
        agent_id: str | None,
        ttl_seconds: float,
        enforce_limits: bool = False,
        host: LeaseHost | None = None,
        now: datetime | None = None,
    ) -> SandboxLease:
        return await self._write_at(
            now,
            _limits.acquire_lease if enforce_limits else _leases.acquire,
            sandbox_id,
            workspace_id,
            session_id,
            environment_id,
            agent_id,
            ttl_seconds,
            host,
        )

    async def move_sandbox_lease(
        self, sandbox_id: str, *, placement: int, host: LeaseHost
    ) -> SandboxLease | None:
        return await self._write(_leases.move, sandbox_id, placement, host)

    async def renew_sandbox_lease(self, sandbox_id: str, *, now: datetime | None = None) -> bool:
        return await self._write_at(now, _leases.renew, sandbox_id)

    async def expire_sandbox_leases(self, *, now: datetime | None = None) -> list[SandboxLease]:
        return await self._write_at(now, _leases.expire_all)

    async def expire_sandbox_lease(
        self,
        sandbox_id: str,
        *,
        reason: LeaseExpiry = LeaseExpiry.EXPLICIT,
        now: datetime | None = None,
    ) -> bool:
        return await self._write_at(now, _leases.expire_one, sandbox_id, reason)

    async def sandbox_lease(self, sandbox_id: str) -> SandboxLease | None:
        return await self._read(_leases.get, sandbox_id)

    async def leases_to_destroy(self) -> list[SandboxLease]:
        return await self._read(_leases.to_destroy)

    async def mark_sandbox_destroyed(
        self,
        sandbox_id: str,
        *,
        now: datetime | None = None,
        reason: LeaseExpiry | None = None,
    ) -> bool:
        return await self._write_at(now, _leases.mark_destroyed, sandbox_id, reason)

    async def add_sandbox_active_seconds(
        self,
        sandbox_id: str,
        *,
        session_id: str | None,
        workspace_id: str,
        seconds: float,
        now: datetime | None = None,
    ) -> None:
        await self._write_at(
            now, _usage.add_active_seconds, sandbox_id, session_id, workspace_id, seconds
        )

    async def sandbox_active_seconds(self, sandbox_id: str) -> float:
        return await self._read(_leases.active_seconds, sandbox_id)

    async def book_sandbox_active_seconds(
        self, sandbox_id: str, *, session_id: str | None, workspace_id: str, total: float
    ) -> float:
        return await self._write(
            _usage.book_active_seconds, sandbox_id, session_id, workspace_id, total
        )
