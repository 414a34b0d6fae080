"""Submitting environments, each kept once (``environments``: the SHA-256 of its canonical JSON
and the environment), and each job's ``env_id`` naming the one it inherits: what a batch job
inherits from the shell that submitted it (sbatch's default ``--export=ALL``), a few kilobytes
that an array's every member would otherwise repeat in its stored request. Jobs stored before
have none.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    op.create_table(
        "environments",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("env", json, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_environments")),
    )
    op.add_column("jobs", sa.Column("env_id", sa.String(), nullable=True))


def downgrade() -> None:
    # (ALTER TABLE … DROP COLUMN, not a batch: on SQLite a batch copies ``jobs`` and drops the
    # old table, and the drop would delete every task with it, ON DELETE CASCADE)
    op.drop_column("jobs", "env_id")
    op.drop_table("environments")
