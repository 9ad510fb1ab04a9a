"""files: metadata of the Files API (the bytes are in the blob store)

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("filename", sa.Text(), nullable=False),
        sa.Column("mime_type", sa.String(length=255), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("blob_key", sa.Text(), nullable=False),
        sa.Column("scope_type", sa.String(length=32), nullable=True),
        sa.Column("scope_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_files_workspace_created", "files", ["workspace_id", "created_at", "id"], unique=False
    )
    op.create_index(
        "ix_files_workspace_scope",
        "files",
        ["workspace_id", "scope_id", "created_at", "id"],
        unique=False,
    )
    op.create_index("ix_files_deleted", "files", ["deleted_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_files_deleted", table_name="files")
    op.drop_index("ix_files_workspace_scope", table_name="files")
    op.drop_index("ix_files_workspace_created", table_name="files")
    op.drop_table("files")
