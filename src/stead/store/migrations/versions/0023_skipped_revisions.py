"""the revisions a database went past without: run where what they make is missing

Revision ID: 0023
Revises: 0022

Revisions were renumbered when work done side by side was merged, after stead
had run without them: a database made or migrated while 0019 (usage_months)
followed 0015 is stamped 0019, and every later one, without the tables of 0016
and 0017 and the column of 0018 (0019 itself makes the usage ledger of 0007
where a database stamped 0008 before that revision came lacks it). Each such
revision runs here, from its own file, where what it makes is missing; a
database that has it is left as it is.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

SKIPPABLE = (
    ("0016", "memory_mounts", None),
    ("0017", "session_repositories", None),
    ("0018", "files", "bytes_removed_at"),
)
"""(revision, a table it makes, or the column it adds to that table)."""


def upgrade() -> None:
    for skipped, table, column in SKIPPABLE:
        found = sa.inspect(op.get_bind())  # afresh: an earlier one may have made a table
        if column is None:
            missing = not found.has_table(table)
        else:
            missing = column not in {c["name"] for c in found.get_columns(table)}
        if missing:
            run(skipped)


def run(skipped: str) -> None:
    """Revision ``skipped``'s own upgrade, as its file has it."""
    script = op.get_context().script
    assert script is not None  # stead runs migrations from their directory
    found = script.get_revision(skipped)
    assert found is not None and found.module is not None
    found.module.upgrade()


def downgrade() -> None:
    pass
