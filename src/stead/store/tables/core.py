"""``metadata``, which every table is on (``tables/__init__.py``), and the
tables of tenancy, agents, environments, sessions with their log, runs and ops,
sandbox leases, usage, vaults, self-hosted work, brains, files and skills, and
a workspace's keys, limits, outputs and repositories."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)

from stead.store.column_types import JsonType, UTCDateTime

metadata = MetaData()

workspaces = Table(
    "workspaces",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("name", Text, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("name", Text, nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("hint", String(16), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime, nullable=True),
    # An operator's key: it may also use the admin routes (``/v1/stead/...``).
    Column("admin", Boolean, nullable=False, server_default=false()),
)

agents = Table(
    "agents",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("latest_version", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("archived_at", UTCDateTime, nullable=True),
    Index("ix_agents_workspace_created", "workspace_id", "created_at", "id"),
)

agent_versions = Table(
    "agent_versions",
    metadata,
    Column("agent_id", String(64), ForeignKey("agents.id"), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("definition", JsonType, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

environments = Table(
    "environments",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("name", Text, nullable=False),
    Column("description", Text, nullable=True),
    Column("config", JsonType, nullable=False),
    Column("metadata", JsonType, nullable=False),
    Column("scope", String(32), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("archived_at", UTCDateTime, nullable=True),
    UniqueConstraint("workspace_id", "name", name="uq_environments_workspace_name"),
    Index("ix_environments_workspace_created", "workspace_id", "created_at", "id"),
)

sessions = Table(
    "sessions",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("agent_version", Integer, nullable=False),
    Column("agent", JsonType, nullable=False),
    Column("environment_id", String(64), nullable=False),
    Column("title", Text, nullable=True),
    Column("metadata", JsonType, nullable=False),
    Column("vault_ids", JsonType, nullable=False),
    Column("budget", JsonType, nullable=True),
    Column("resources", JsonType, nullable=False),
    Column("usage", JsonType, nullable=False),
    Column("last_seq", BigInteger, nullable=False),
    Column("pending_tail", BigInteger, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("archived_at", UTCDateTime, nullable=True),
    Column("terminated_at", UTCDateTime, nullable=True),
    # The queue's tail when an interrupt last reached the session during a turn:
    # what was queued past it came after the interrupt (``_inbox.file_in``).
    Column("interrupt_tail", BigInteger, nullable=True),
    Index("ix_sessions_workspace_created", "workspace_id", "created_at", "id"),
    Index("ix_sessions_environment", "environment_id"),
)

events = Table(
    "events",
    metadata,
    Column("session_id", String(64), ForeignKey("sessions.id"), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("id", String(64), nullable=False, unique=True),
    Column("type", String(64), nullable=False),
    Column("body", JsonType, nullable=False),
    Column("processed_at", UTCDateTime, nullable=False),
)

pending = Table(
    "pending",
    metadata,
    Column("session_id", String(64), ForeignKey("sessions.id"), primary_key=True),
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("id", String(64), nullable=False, unique=True),
    Column("type", String(64), nullable=False),
    Column("body", JsonType, nullable=False),
    Column("received_at", UTCDateTime, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("session_id", String(64), ForeignKey("sessions.id"), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("owner", String(128), nullable=True),
    Column("epoch", BigInteger, nullable=False),
    Column("lease_until", UTCDateTime, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_runs_session_status", "session_id", "status"),
)

ops = Table(
    "ops",
    metadata,
    Column("op_key", String(64), primary_key=True),
    Column("session_id", String(64), ForeignKey("sessions.id"), nullable=False),
    Column("run_id", String(64), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("result", JsonType, nullable=True),
    Column("epoch", BigInteger, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    # The session's sandbox placement when the op started (``sandbox_leases.placement``),
    # for an op that renewed the lease: a sandbox moved since may never have seen it.
    Column("placement", BigInteger, nullable=True),
    Index("ix_ops_session", "session_id"),
)

sandbox_leases = Table(
    "sandbox_leases",
    metadata,
    # Deterministic: the session id, or "{agent_id}::{environment_id}" for a shared sandbox.
    # No foreign key to sessions or environments: a lease outlives a deleted session or
    # environment until the sweeper has destroyed its sandbox.
    Column("sandbox_id", String(160), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("session_id", String(64), nullable=True),
    Column("environment_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=True),
    Column("status", String(16), nullable=False),
    Column("expiry_reason", String(32), nullable=True),
    Column("ttl_seconds", Float, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("last_activity_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=False),
    Column("expired_at", UTCDateTime, nullable=True),
    Column("destroyed_at", UTCDateTime, nullable=True),
    # The sandbox host holding the sandbox (None: none yet, or destroyed) and the
    # address other processes reach it at; ``placement`` counts the times the
    # sandbox was placed on a host, and fences a move (compare and set).
    Column("host_id", String(128), nullable=True),
    Column("host_address", String(300), nullable=True),
    Column("placement", BigInteger, nullable=False, server_default="0"),
    Index("ix_sandbox_leases_status_expires", "status", "expires_at"),
)

sandbox_usage = Table(
    "sandbox_usage",
    metadata,
    Column("sandbox_id", String(160), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("session_id", String(64), nullable=True),
    Column("active_seconds", Float, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_sandbox_usage_session", "session_id"),
)

usage_ledger = Table(
    "usage_ledger",
    metadata,
    # One row per workspace, UTC day, session and model ("" for sandbox time, and
    # for the session of a shared sandbox): counters added to in the transaction
    # that records what was used (``_usage.py``).
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), primary_key=True),
    Column("day", String(10), primary_key=True),
    Column("session_id", String(64), primary_key=True),
    Column("model", String(256), primary_key=True),
    Column("requests", BigInteger, nullable=False),
    Column("input_tokens", BigInteger, nullable=False),
    Column("output_tokens", BigInteger, nullable=False),
    Column("cache_read_input_tokens", BigInteger, nullable=False),
    Column("ephemeral_5m_input_tokens", BigInteger, nullable=False),
    Column("ephemeral_1h_input_tokens", BigInteger, nullable=False),
    Column("list_cost_nanos", BigInteger, nullable=False),
    Column("unpriced_requests", BigInteger, nullable=False),
    Column("active_seconds", Float, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

usage_months = Table(
    "usage_months",
    metadata,
    # The ledger summed per workspace and UTC month, kept in the same transaction
    # as each ledger row (``_usage.ledger_add``), so the limit checks before every
    # model request read one row instead of summing the month's ledger rows, whose
    # number grows with the workspace's sessions.
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), primary_key=True),
    Column("month", String(7), primary_key=True),
    Column("tokens", BigInteger, nullable=False),
    Column("list_cost_nanos", BigInteger, nullable=False),
    Column("active_seconds", Float, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

vaults = Table(
    "vaults",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("display_name", Text, nullable=False),
    Column("metadata", JsonType, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("archived_at", UTCDateTime, nullable=True),
    Index("ix_vaults_workspace_created", "workspace_id", "created_at", "id"),
)

vault_credentials = Table(
    "vault_credentials",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("vault_id", String(64), ForeignKey("vaults.id"), nullable=False),
    Column("display_name", Text, nullable=True),
    Column("metadata", JsonType, nullable=False),
    Column("auth", JsonType, nullable=False),
    Column("sealed", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("archived_at", UTCDateTime, nullable=True),
    Index("ix_vault_credentials_vault_created", "vault_id", "created_at", "id"),
)

installation_secrets = Table(
    "installation_secrets",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", LargeBinary, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)

console_logouts = Table(
    "console_logouts",
    metadata,
    # SHA-256 of a console login's token: the login ended by logging out.
    Column("token_hash", String(64), primary_key=True),
    Column("expires_at", UTCDateTime, nullable=False),
    Index("ix_console_logouts_expires", "expires_at"),
)

environment_keys = Table(
    "environment_keys",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("environment_id", String(64), nullable=False),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("hint", String(16), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("revoked_at", UTCDateTime, nullable=True),
    Index("ix_environment_keys_environment", "environment_id"),
)

work_items = Table(
    "work_items",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("environment_id", String(64), nullable=False),
    Column("session_id", String(64), nullable=True),
    Column("state", String(16), nullable=False),
    Column("metadata", JsonType, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("worker_id", String(200), nullable=True),
    Column("token_hash", String(64), nullable=True, unique=True),
    Column("last_heartbeat", String(64), nullable=True),
    Column("ttl_seconds", Float, nullable=False),
    Column("lease_until", UTCDateTime, nullable=True),
    Column("in_doubt", Integer, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("polled_at", UTCDateTime, nullable=True),
    Column("acknowledged_at", UTCDateTime, nullable=True),
    Column("started_at", UTCDateTime, nullable=True),
    Column("latest_heartbeat_at", UTCDateTime, nullable=True),
    Column("stop_requested_at", UTCDateTime, nullable=True),
    Column("stopped_at", UTCDateTime, nullable=True),
    Column("key_id", String(64), nullable=True),
    Index("ix_work_items_environment_state", "environment_id", "state", "created_at"),
    Index("ix_work_items_session", "session_id"),
)
"""Self-hosted environments' work queue (``_work.py``): one row per time a
session needed a worker; ``epoch`` fences claims, ``token_hash`` is the current
claim's sessions token (a new claim revokes the old one), ``key_id`` the
environment key that claim was polled with (revoking the key ends the claim)."""

brains = Table(
    "brains",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("machine", String(64), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", UTCDateTime, nullable=False),
    Column("heartbeat_at", UTCDateTime, nullable=False),
    Column("stopped_at", UTCDateTime, nullable=True),
)
"""The ``stead serve`` processes of a shared store (PostgreSQL), one row each
(``_brains.py``); a run's ``owner`` is its brain's id. ``machine`` tells which
rows are of processes this machine can see (same boot and pid namespace)."""

files = Table(
    "files",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("filename", Text, nullable=False),
    Column("mime_type", String(255), nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("blob_key", Text, nullable=False),
    Column("scope_type", String(32), nullable=True),
    Column("scope_id", String(64), nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("expires_at", UTCDateTime, nullable=True),
    Column("ready_at", UTCDateTime, nullable=True),
    Column("deleted_at", UTCDateTime, nullable=True),
    Column("bytes_removed_at", UTCDateTime, nullable=True),
    Index("ix_files_workspace_created", "workspace_id", "created_at", "id"),
    Index("ix_files_workspace_scope", "workspace_id", "scope_id", "created_at", "id"),
    Index("ix_files_deleted", "deleted_at"),
    Index("ix_files_expires", "expires_at"),
)
"""Files API metadata (``_files.py``); the bytes are in the blob store under
``blob_key``. A row is visible once ``ready_at`` is set (its blob is complete)
and until ``deleted_at`` is (a tombstone: its blob is being removed, then the row).
``bytes_removed_at``: the file expired and its blob is gone; the row stays, so
its metadata is still shown (its download is a 404 ``file_expired``)."""

skills = Table(
    "skills",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("name", String(64), nullable=False),
    Column("display_name", String(255), nullable=False),
    Column("latest_version", String(32), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_skills_workspace_name", "workspace_id", "name", unique=True),
    Index("ix_skills_workspace_created", "workspace_id", "created_at", "id"),
)
"""Custom skills (``_skills.py``); ``name`` is the immutable slug of every version."""

skill_versions = Table(
    "skill_versions",
    metadata,
    Column("skill_id", String(64), ForeignKey("skills.id"), primary_key=True),
    Column("version", String(32), primary_key=True),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("name", String(64), nullable=False),
    Column("description", Text, nullable=False),
    Column("file_id", String(64), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_skill_versions_created", "skill_id", "created_at", "version"),
)
"""Immutable skill versions; the zip is the files row ``file_id`` (scope ``skill``)."""

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("token", String(64), nullable=False),
    Column("status", Integer, nullable=True),
    Column("content_type", String(255), nullable=True),
    Column("body", LargeBinary, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_idempotency_keys_created", "created_at"),
)
"""``Idempotency-Key`` headers a workspace sent (``_idempotency.py``): the
request's fingerprint and, once it has one, its answer. ``token`` names the
request that holds the key; ``status`` is null while that request runs."""

workspace_limits = Table(
    "workspace_limits",
    metadata,
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), primary_key=True),
    Column("scope", String(64), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)
"""stead's own limits (``limits.py``): ``scope`` is "" for the workspace's, else
the id of the environment they apply to."""
session_outputs = Table(
    "session_outputs",
    metadata,
    Column("session_id", String(64), primary_key=True),
    Column("path", String(1024), primary_key=True),
    Column("sha256", String(64), primary_key=True),
    Column("file_id", String(64), nullable=False),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
)
"""Captured outputs (``_resources.py``): which file holds each content a
session wrote at a path under ``/mnt/session/outputs``. Outlives the session,
as its files do."""
session_repositories = Table(
    "session_repositories",
    metadata,
    Column("resource_id", String(64), primary_key=True),
    Column("session_id", String(64), nullable=False),
    Column("workspace_id", String(64), ForeignKey("workspaces.id"), nullable=False),
    Column("sealed_token", LargeBinary, nullable=True),
    Column("cloned_at", UTCDateTime, nullable=True),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_session_repositories_session", "session_id"),
)
"""The private side of each ``github_repository`` resource (``_repositories.py``):
its authorization token, only ever stored sealed (``stead.vault``) and bound to
the resource id, and when its clone into the sandbox finished. Goes with the
resource and with its session."""
