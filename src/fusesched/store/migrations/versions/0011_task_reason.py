"""Each ended task's reason, as its agent said it (the kernel's OOM killer, its walltime,
…), so that ``fusesched sacct`` shows a step the OOM killer killed in as ``OUT_OF_MEMORY``
(Slurm's) whatever its exit status, and ``fusesched show`` each task's reason; empty for the
tasks stored before.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("reason", sa.String(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("reason")
