"""sandbox_leases: the host holding each sandbox and its placement; ops: the placement
an op started at

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandbox_leases") as batch:
        batch.add_column(sa.Column("host_id", sa.String(length=128), nullable=True))
        batch.add_column(sa.Column("host_address", sa.String(length=300), nullable=True))
        batch.add_column(
            sa.Column("placement", sa.BigInteger(), nullable=False, server_default="0")
        )
    op.add_column("ops", sa.Column("placement", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("ops", "placement")
    with op.batch_alter_table("sandbox_leases") as batch:
        batch.drop_column("placement")
        batch.drop_column("host_address")
        batch.drop_column("host_id")
