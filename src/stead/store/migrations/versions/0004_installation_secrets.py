"""installation secrets; stored JSON healed

Revision ID: 0004
Revises: 0003

Adds the installation's secrets with the page cursors' HMAC key (made here, so
that a server's start never writes) and rewrites any
JSON value an earlier version stored that no read can render (see
``stead.store._integrity``), so a data directory that holds one is readable
again after the upgrade.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from stead.store._integrity import json_findings

SCHEMA_JSON_COLUMNS = (
    ("agent_versions", ("agent_id", "version"), ("definition",)),
    ("environments", ("id",), ("config", "metadata")),
    ("sessions", ("id",), ("agent", "metadata", "vault_ids", "budget", "resources", "usage")),
    ("events", ("session_id", "seq"), ("body",)),
    ("pending", ("session_id", "id"), ("body",)),
    ("ops", ("op_key",), ("result",)),
)
"""The JSON columns as of this revision: ``_integrity.JSON_COLUMNS`` follows the
newest schema, which may name tables or columns a database at 0003 lacks."""

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "installation_secrets",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    created = datetime.now(UTC).replace(tzinfo=None)  # as UTCDateTime stores it on SQLite
    row = {"name": "page_cursors", "value": secrets.token_bytes(32), "created_at": created}
    op.bulk_insert(table, [row])
    json_findings(op.get_bind(), repair=True, tables=SCHEMA_JSON_COLUMNS)


def downgrade() -> None:
    op.drop_table("installation_secrets")
