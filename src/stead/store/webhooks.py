"""``WebhookStore``: a workspace's webhook endpoints, the outbox of deliveries
to them and every attempt (the narrow protocol; SQL in ``_webhooks.py``).

Outbox rows are written by the transaction that made their event (the log
append, or the resource's own write), one per subscribed endpoint, so an event
is committed together with its deliveries or not at all. A delivery is claimed
for ``lease_seconds``; one whose process died is claimed again after it. An
endpoint's deliveries go out one at a time, in ``position`` order.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

WorkspaceScope = str | None
"""A workspace id, or None for every workspace (the operator's CLI)."""


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    id: str
    workspace_id: str
    url: str
    description: str | None
    event_types: tuple[str, ...]
    enabled: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class WebhookAttempt:
    attempt: int
    at: datetime
    status_code: int | None
    """The receiver's answer; None when there was none (``error`` says why)."""
    error: str | None


class DeliveryState(enum.StrEnum):
    """``pending -> delivered | failed``; pending again after each failed attempt."""

    PENDING = "pending"
    """Waiting for its next attempt (``next_attempt_at``) or out on one."""
    DELIVERED = "delivered"
    """The receiver answered 2xx."""
    FAILED = "failed"
    """Still failing ``give_up_seconds`` after its event: no more attempts."""


@dataclass(frozen=True, slots=True)
class WebhookDelivery:
    id: str
    endpoint_id: str
    event_id: str
    event_type: str
    state: DeliveryState
    attempts: int
    next_attempt_at: datetime
    created_at: datetime
    finished_at: datetime | None
    tries: tuple[WebhookAttempt, ...]


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """A claimed delivery and what sending it needs."""

    id: str
    endpoint_id: str
    url: str
    sealed_secret: bytes
    payload: str
    attempt: int
    """This attempt's number, from 1."""
    claim_token: str
    created_at: datetime

    def __repr__(self) -> str:  # the sealed secret stays out of tracebacks
        return (
            f"DueDelivery(id={self.id!r}, endpoint_id={self.endpoint_id!r}, attempt={self.attempt})"
        )


@dataclass(frozen=True, slots=True)
class RetryTerms:
    base_seconds: float
    """The wait after the first failed attempt; it doubles after each one."""
    max_seconds: float
    give_up_seconds: float
    """A delivery still failing this long after its event is ``failed``."""
    keep_seconds: float
    """Finished deliveries and their attempts are deleted after this."""


@dataclass(frozen=True, slots=True)
class AttemptResult:
    status_code: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class WebhookStore(Protocol):
    async def create_webhook_endpoint(
        self,
        workspace_id: str,
        endpoint_id: str,
        fields: Mapping[str, object],
        sealed_secret: bytes,
    ) -> WebhookEndpoint:
        """``fields``: url, event_types, description (checked by ``stead.schemas.webhooks``);
        ``sealed_secret``: sealed for ``endpoint_id``."""
        ...

    async def get_webhook_endpoint(
        self, workspace_id: WorkspaceScope, endpoint_id: str
    ) -> WebhookEndpoint:
        """Raises ``NotFound``."""
        ...

    async def list_webhook_endpoints(self, workspace_id: WorkspaceScope) -> list[WebhookEndpoint]:
        """Oldest first."""
        ...

    async def update_webhook_endpoint(
        self,
        workspace_id: WorkspaceScope,
        endpoint_id: str,
        change: Mapping[str, object],
        sealed_secret: bytes | None = None,
    ) -> WebhookEndpoint:
        """Sets the ``change`` fields (url, event_types, description, enabled), and the
        secret when given. Raises ``NotFound``."""
        ...

    async def delete_webhook_endpoint(self, workspace_id: WorkspaceScope, endpoint_id: str) -> None:
        """Deletes the endpoint with its deliveries and attempts. Raises ``NotFound``."""
        ...

    async def list_webhook_deliveries(
        self, workspace_id: WorkspaceScope, endpoint_id: str, limit: int
    ) -> list[WebhookDelivery]:
        """The endpoint's newest ``limit`` deliveries, newest first, with their attempts."""
        ...

    async def webhook_deliveries_due(self) -> bool:
        """Whether a delivery is waiting to be claimed now (a read: an idle
        courier commits nothing)."""
        ...

    async def claim_webhook_deliveries(self, limit: int, lease_seconds: float) -> list[DueDelivery]:
        """Claims up to ``limit`` due deliveries, each the oldest pending one of its
        enabled endpoint, for ``lease_seconds``. Processes sharing the store never
        claim the same delivery at once (``FOR UPDATE SKIP LOCKED`` on PostgreSQL)."""
        ...

    async def reseal_webhook_secrets(self, reseal: Callable[[str, bytes], bytes | None]) -> int:
        """Replaces each endpoint's sealed secret with ``reseal(endpoint_id, sealed)``
        where that is not None (a key rotation); returns how many changed."""
        ...

    async def finish_webhook_delivery(
        self, delivery: DueDelivery, result: AttemptResult, retry: RetryTerms
    ) -> None:
        """Records the attempt, then marks the delivery delivered, failed (past
        ``give_up_seconds``) or due again after the backoff. A claim that was taken
        over records its attempt and changes nothing else."""
        ...
