"""the usage ledger: tokens, list cost and sandbox time per workspace, day, session and model

Revision ID: 0007
Revises: 0006

Usage recorded before it starts from its first model request or sandbox time
after the upgrade; sessions keep their own cumulative usage as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

COUNTERS = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "ephemeral_5m_input_tokens",
    "ephemeral_1h_input_tokens",
    "list_cost_nanos",
    "unpriced_requests",
)


def upgrade() -> None:
    op.create_table(
        "usage_ledger",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in COUNTERS),
        sa.Column("active_seconds", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("workspace_id", "day", "session_id", "model"),
    )


def downgrade() -> None:
    op.drop_table("usage_ledger")
