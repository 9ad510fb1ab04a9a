"""The tables of webhooks: endpoints, the outbox of deliveries, and attempts."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
)

from stead.store.column_types import JsonType, UTCDateTime
from stead.store.tables.core import metadata

webhook_endpoints = Table(
    "webhook_endpoints",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("url", Text, nullable=False),
    Column("description", Text, nullable=True),
    Column("event_types", JsonType, nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("sealed_secret", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_webhook_endpoints_workspace", "workspace_id", "created_at", "id"),
)
"""Where a workspace's webhook deliveries go (``_webhooks.py``). The signing
secret is only ever stored sealed (``stead.vault``), bound to the endpoint id."""

webhook_deliveries = Table(
    "webhook_deliveries",
    metadata,
    Column("position", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("endpoint_id", String(64), ForeignKey("webhook_endpoints.id"), nullable=False),
    Column("event_id", String(64), nullable=False),
    Column("event_type", String(64), nullable=False),
    Column("payload", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", UTCDateTime, nullable=False),
    Column("claim_token", String(64), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),
    Index("ix_webhook_deliveries_endpoint", "endpoint_id", "state", "position"),
)
"""The outbox: one row per (event, subscribed endpoint), written in the
transaction that made the event; ``position`` orders an endpoint's deliveries.
``state`` is pending -> delivered | failed."""

webhook_attempts = Table(
    "webhook_attempts",
    metadata,
    Column("delivery_id", String(64), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("endpoint_id", String(64), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("error", Text, nullable=True),
    Index("ix_webhook_attempts_endpoint", "endpoint_id", "at"),
)
"""Every delivery attempt: the receiver's status, or why there was none."""
