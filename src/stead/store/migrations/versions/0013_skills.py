"""skills, skill_versions: custom skills (their zips are rows of files)

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "skills",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("display_name", sa.String(length=255), nullable=False),
        sa.Column("latest_version", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_skills_workspace_name", "skills", ["workspace_id", "name"], unique=True)
    op.create_index(
        "ix_skills_workspace_created", "skills", ["workspace_id", "created_at", "id"], unique=False
    )
    op.create_table(
        "skill_versions",
        sa.Column("skill_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("workspace_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("file_id", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["skill_id"], ["skills.id"]),
        sa.ForeignKeyConstraint(["workspace_id"], ["workspaces.id"]),
        sa.PrimaryKeyConstraint("skill_id", "version"),
    )
    op.create_index(
        "ix_skill_versions_created",
        "skill_versions",
        ["skill_id", "created_at", "version"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_skill_versions_created", table_name="skill_versions")
    op.drop_table("skill_versions")
    op.drop_index("ix_skills_workspace_created", table_name="skills")
    op.drop_index("ix_skills_workspace_name", table_name="skills")
    op.drop_table("skills")
