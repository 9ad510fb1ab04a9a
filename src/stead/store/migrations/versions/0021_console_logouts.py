"""console_logouts: console logins ended by logging out, until they would have expired

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_logouts",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("token_hash"),
    )
    op.create_index("ix_console_logouts_expires", "console_logouts", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_console_logouts_expires", table_name="console_logouts")
    op.drop_table("console_logouts")
