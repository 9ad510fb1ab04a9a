"""sandbox leases and sandbox usage

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "sandbox_leases",
        sa.Column("sandbox_id", sa.String(length=160), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("environment_id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("expiry_reason", sa.String(length=32), nullable=True),
        sa.Column("ttl_seconds", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_activity_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expired_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("destroyed_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
        ),
        sa.PrimaryKeyConstraint("sandbox_id"),
    )
    with op.batch_alter_table("sandbox_leases", schema=None) as batch_op:
        batch_op.create_index(
            "ix_sandbox_leases_status_expires", ["status", "expires_at"], unique=False
        )

    op.create_table(
        "sandbox_usage",
        sa.Column("sandbox_id", sa.String(length=160), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("active_seconds", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
        ),
        sa.PrimaryKeyConstraint("sandbox_id"),
    )
    with op.batch_alter_table("sandbox_usage", schema=None) as batch_op:
        batch_op.create_index("ix_sandbox_usage_session", ["session_id"], unique=False)


def downgrade() -> None:

    with op.batch_alter_table("sandbox_usage", schema=None) as batch_op:
        batch_op.drop_index("ix_sandbox_usage_session")

    op.drop_table("sandbox_usage")
    with op.batch_alter_table("sandbox_leases", schema=None) as batch_op:
        batch_op.drop_index("ix_sandbox_leases_status_expires")

    op.drop_table("sandbox_leases")
