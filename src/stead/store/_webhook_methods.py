"""``WebhookStore`` on the SQL store: each method one transaction of ``_webhooks.py``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from stead.store import _webhooks
from stead.store.webhooks import (
    AttemptResult,
    DueDelivery,
    RetryTerms,
    WebhookDelivery,
    WebhookEndpoint,
    WorkspaceScope,
)

R = TypeVar("R")


class WebhookMethods:
    """Mixed into ``SqlStore``, which provides ``_time``, ``_write`` and ``_read``."""

    def _time(self) -> datetime:
        raise NotImplementedError

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def create_webhook_endpoint(
        self,
        workspace_id: str,
        endpoint_id: str,
        fields: Mapping[str, object],
        sealed_secret: bytes,
    ) -> WebhookEndpoint:
        return await self._write(_webhooks.create, workspace_id, endpoint_id, fields, sealed_secret)

    async def get_webhook_endpoint(
        self, workspace_id: WorkspaceScope, endpoint_id: str
    ) -> WebhookEndpoint:
        return await self._read(_webhooks.get, workspace_id, endpoint_id)

    async def list_webhook_endpoints(self, workspace_id: WorkspaceScope) -> list[WebhookEndpoint]:
        return await self._read(_webhooks.list_, workspace_id)

    async def update_webhook_endpoint(
        self,
        workspace_id: WorkspaceScope,
        endpoint_id: str,
        change: Mapping[str, object],
        sealed_secret: bytes | None = None,
    ) -> WebhookEndpoint:
        return await self._write(
            _webhooks.update_, workspace_id, endpoint_id, change, sealed_secret
        )

    async def delete_webhook_endpoint(self, workspace_id: WorkspaceScope, endpoint_id: str) -> None:
        await self._write(lambda conn, _now: _webhooks.delete_(conn, workspace_id, endpoint_id))

    async def list_webhook_deliveries(
        self, workspace_id: WorkspaceScope, endpoint_id: str, limit: int
    ) -> list[WebhookDelivery]:
        return await self._read(_webhooks.deliveries, workspace_id, endpoint_id, limit)

    async def webhook_deliveries_due(self) -> bool:
        return await self._read(_webhooks.any_due, self._time())

    async def claim_webhook_deliveries(self, limit: int, lease_seconds: float) -> list[DueDelivery]:
        return await self._write(_webhooks.claim, limit, lease_seconds)

    async def reseal_webhook_secrets(self, reseal: Callable[[str, bytes], bytes | None]) -> int:
        return await self._write(_webhooks.reseal, reseal)

    async def finish_webhook_delivery(
        self, delivery: DueDelivery, result: AttemptResult, retry: RetryTerms
    ) -> None:
        await self._write(_webhooks.finish, delivery, result, retry)
