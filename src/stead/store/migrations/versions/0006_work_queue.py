"""self-hosted environments: environment keys and the work queue

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def _at(name: str, nullable: bool = True) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "environment_keys",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("environment_id", sa.String(length=64), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("hint", sa.String(length=16), nullable=False),
        _at("created_at", nullable=False),
        _at("revoked_at"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key_hash"),
    )
    op.create_index("ix_environment_keys_environment", "environment_keys", ["environment_id"])
    op.create_table(
        "work_items",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("environment_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("worker_id", sa.String(length=200), nullable=True),
        sa.Column("token_hash", sa.String(length=64), nullable=True),
        sa.Column("last_heartbeat", sa.String(length=64), nullable=True),
        sa.Column("ttl_seconds", sa.Float(), nullable=False),
        _at("lease_until"),
        sa.Column("in_doubt", sa.Integer(), nullable=False),
        _at("created_at", nullable=False),
        _at("polled_at"),
        _at("acknowledged_at"),
        _at("started_at"),
        _at("latest_heartbeat_at"),
        _at("stop_requested_at"),
        _at("stopped_at"),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("token_hash"),
    )
    op.create_index(
        "ix_work_items_environment_state", "work_items", ["environment_id", "state", "created_at"]
    )
    op.create_index("ix_work_items_session", "work_items", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_work_items_session", table_name="work_items")
    op.drop_index("ix_work_items_environment_state", table_name="work_items")
    op.drop_table("work_items")
    op.drop_index("ix_environment_keys_environment", table_name="environment_keys")
    op.drop_table("environment_keys")
