"""``IdempotencyStore`` on the SQL store: each method one transaction of ``_idempotency.py``."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from stead.store import _idempotency
from stead.store.idempotency import IdempotencyClaim, KeyClaim, claiming_key

R = TypeVar("R")


class IdempotencyMethods:
    """Mixed into ``SqlStore``, which provides ``_write_unflushed``.

    None of these commits is flushed on its own: a claim is a lock no answer
    depends on (the route's own write, flushed, comes after it and makes it
    durable too), and an answer is kept after its response was sent, so
    flushing it promises nothing more. A process kill loses neither."""

    async def _write_unflushed(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    def claiming_key(self, claim: KeyClaim) -> AbstractContextManager[None]:
        return claiming_key(claim)

    async def claim_idempotency_key(
        self,
        workspace_id: str,
        key: str,
        fingerprint: str,
        *,
        ttl_seconds: float,
        abandoned_seconds: float,
    ) -> IdempotencyClaim:
        return await self._write_unflushed(
            _idempotency.claim, workspace_id, key, fingerprint, ttl_seconds, abandoned_seconds
        )

    async def keep_idempotent_answer(
        self,
        workspace_id: str,
        key: str,
        token: str,
        *,
        status: int,
        content_type: str | None,
        body: bytes | None,
        ttl_seconds: float,
    ) -> None:
        await self._write_unflushed(
            _idempotency.keep, workspace_id, key, token, status, content_type, body, ttl_seconds
        )

    async def release_idempotency_key(self, workspace_id: str, key: str, token: str) -> None:
        await self._write_unflushed(_idempotency.release, workspace_id, key, token)
