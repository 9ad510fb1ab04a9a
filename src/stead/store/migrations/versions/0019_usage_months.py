"""usage_months: each workspace's ledger summed per UTC month, for the limit checks

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

TOKENS = (
    "input_tokens + output_tokens + cache_read_input_tokens"
    " + ephemeral_5m_input_tokens + ephemeral_1h_input_tokens"
)


def upgrade() -> None:
    if not sa.inspect(op.get_bind()).has_table("usage_ledger"):
        # A database stamped 0008 before the ledger's revision was numbered
        # 0007 went past it without the ledger: made here, as 0007 makes it.
        found = op.get_context().script
        assert found is not None
        ledger = found.get_revision("0007")
        assert ledger is not None and ledger.module is not None
        ledger.module.upgrade()
    op.create_table(
        "usage_months",
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("month", sa.String(length=7), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("list_cost_nanos", sa.BigInteger(), nullable=False),
        sa.Column("active_seconds", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("workspace_id", "month"),
    )
    # The months already in the ledger; later additions keep them in step.
    op.execute(
        "INSERT INTO usage_months"
        " (workspace_id, month, tokens, list_cost_nanos, active_seconds, updated_at)"
        f" SELECT workspace_id, substr(day, 1, 7), sum({TOKENS}), sum(list_cost_nanos),"
        " sum(active_seconds), max(updated_at)"
        " FROM usage_ledger GROUP BY workspace_id, substr(day, 1, 7)"
    )


def downgrade() -> None:
    op.drop_table("usage_months")
