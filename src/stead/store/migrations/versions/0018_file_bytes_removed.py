"""files: bytes_removed_at, set once an expired file's blob is deleted

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("files", sa.Column("bytes_removed_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_files_expires", "files", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_files_expires", table_name="files")
    op.drop_column("files", "bytes_removed_at")
