"""memory stores: stores, memories and their versions (content in the blob store)

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
PATH = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "memory_stores",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_memory_stores_workspace_created",
        "memory_stores",
        ["workspace_id", "created_at", "id"],
        unique=False,
    )
    op.create_table(
        "memories",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("memory_store_id", sa.String(length=64), nullable=False),
        sa.Column("path", PATH, nullable=False),
        sa.Column("content_sha256", sa.String(length=64), nullable=False),
        sa.Column("content_size_bytes", sa.Integer(), nullable=False),
        sa.Column("version_id", sa.String(length=64), nullable=False),
        sa.Column("blob_key", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["memory_store_id"], ["memory_stores.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("memory_store_id", "path", name="uq_memories_store_path"),
    )
    op.create_table(
        "memory_versions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("memory_store_id", sa.String(length=64), nullable=False),
        sa.Column("memory_id", sa.String(length=64), nullable=False),
        sa.Column("operation", sa.String(length=16), nullable=False),
        sa.Column("path", PATH, nullable=True),
        sa.Column("content_sha256", sa.String(length=64), nullable=True),
        sa.Column("content_size_bytes", sa.Integer(), nullable=True),
        sa.Column("blob_key", sa.Text(), nullable=True),
        sa.Column("actor_type", sa.String(length=32), nullable=True),
        sa.Column("actor_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("blob_released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("redacted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("redacted_by_type", sa.String(length=32), nullable=True),
        sa.Column("redacted_by_id", sa.String(length=64), nullable=True),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_memory_versions_store_created",
        "memory_versions",
        ["memory_store_id", "created_at", "id"],
        unique=False,
    )
    op.create_index("ix_memory_versions_memory", "memory_versions", ["memory_id"], unique=False)
    op.create_index(
        "ix_memory_versions_committed", "memory_versions", ["committed_at"], unique=False
    )
    op.create_index(
        "ix_memory_versions_released", "memory_versions", ["blob_released_at"], unique=False
    )


def downgrade() -> None:
    op.drop_table("memory_versions")
    op.drop_table("memories")
    op.drop_index("ix_memory_stores_workspace_created", table_name="memory_stores")
    op.drop_table("memory_stores")
