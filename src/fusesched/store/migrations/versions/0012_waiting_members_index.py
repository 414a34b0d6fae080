"""A partial index of the waiting array members (those that wait and never started), by
array and reason: what ``GET /v1/jobs?combine_arrays=true`` (squeue without ``-r``) groups,
read from the index alone instead of every waiting job and its row.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

#: The index's condition, as ``schema.WAITING_MEMBERS_SQL`` has it (a migration keeps its
#: own copy: it must create what it created when it shipped).
WAITING = "state = 'Pending' AND array_parent IS NOT NULL AND start_time IS NULL"


def upgrade() -> None:
    op.create_index(
        "ix_jobs_waiting_members",
        "jobs",
        ["state", "array_parent", "reason", "seq", "id", "start_time"],
        sqlite_where=sa.text(WAITING),
        postgresql_where=sa.text(WAITING),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_waiting_members", table_name="jobs")
