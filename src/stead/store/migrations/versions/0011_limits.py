"""workspace_limits: stead's own limits per workspace and environment; admin API keys

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workspace_limits",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("workspace_id", "scope", "name"),
    )
    # A plain ADD COLUMN (SQLite allows it with a default): a batch copy would
    # rename the table and quote its name in the stored schema.
    admin: sa.Column[bool] = sa.Column(
        "admin", sa.Boolean(), nullable=False, server_default=sa.false()
    )
    op.add_column("api_keys", admin)


def downgrade() -> None:
    op.drop_column("api_keys", "admin")
    op.drop_table("workspace_limits")
