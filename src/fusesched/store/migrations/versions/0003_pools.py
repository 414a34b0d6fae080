"""Federation: the pool that ran a job, and an external cluster's id for its run.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("pool", sa.String(), nullable=True))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("external_id", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("external_id")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("pool")
