"""The schema, written once in SQLAlchemy Core for SQLite and PostgreSQL alike,
one module per family of tables, every table on one ``metadata``: importing
any of them imports them all, so the metadata is whole wherever it is read.

Migrations in ``migrations/versions`` create exactly these tables, and a new
database is created from them directly; tests check that the three agree.
"""

from __future__ import annotations

from stead.store.tables.core import (
    agent_versions,
    agents,
    api_keys,
    brains,
    console_logouts,
    environment_keys,
    environments,
    events,
    files,
    idempotency_keys,
    installation_secrets,
    metadata,
    ops,
    pending,
    runs,
    sandbox_leases,
    sandbox_usage,
    session_outputs,
    session_repositories,
    sessions,
    skill_versions,
    skills,
    usage_ledger,
    usage_months,
    vault_credentials,
    vaults,
    work_items,
    workspace_limits,
    workspaces,
)
from stead.store.tables.memory import (
    memories,
    memory_mounts,
    memory_stores,
    memory_versions,
    session_memory_stores,
)
from stead.store.tables.webhooks import (
    webhook_attempts,
    webhook_deliveries,
    webhook_endpoints,
)

__all__ = [
    "agent_versions",
    "agents",
    "api_keys",
    "brains",
    "console_logouts",
    "environment_keys",
    "environments",
    "events",
    "files",
    "idempotency_keys",
    "installation_secrets",
    "memories",
    "memory_mounts",
    "memory_stores",
    "memory_versions",
    "metadata",
    "ops",
    "pending",
    "runs",
    "sandbox_leases",
    "sandbox_usage",
    "session_memory_stores",
    "session_outputs",
    "session_repositories",
    "sessions",
    "skill_versions",
    "skills",
    "usage_ledger",
    "usage_months",
    "vault_credentials",
    "vaults",
    "webhook_attempts",
    "webhook_deliveries",
    "webhook_endpoints",
    "work_items",
    "workspace_limits",
    "workspaces",
]
