"""session_repositories: a repository resource's sealed token and clone state

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "session_repositories",
        sa.Column("resource_id", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("sealed_token", sa.LargeBinary(), nullable=True),
        sa.Column("cloned_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("resource_id"),
    )
    op.create_index(
        "ix_session_repositories_session", "session_repositories", ["session_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_session_repositories_session", table_name="session_repositories")
    op.drop_table("session_repositories")
