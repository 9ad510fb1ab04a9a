"""session_memory_stores and memory_mounts: memory stores attached to sessions,
and the base of each memory file mounted in a session's sandbox

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_memory_stores",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("memory_store_id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("session_id", "memory_store_id"),
    )
    op.create_index(
        "ix_session_memory_stores_store",
        "session_memory_stores",
        ["workspace_id", "memory_store_id"],
        unique=False,
    )
    op.create_table(
        "memory_mounts",
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("memory_store_id", sa.String(length=64), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        sa.Column("memory_id", sa.String(length=64), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("session_id", "memory_store_id", "path"),
    )


def downgrade() -> None:
    op.drop_table("memory_mounts")
    op.drop_index("ix_session_memory_stores_store", table_name="session_memory_stores")
    op.drop_table("session_memory_stores")
