"""Each task's job step (``srun`` inside a job: ``ID.0``, ``ID.1``…) and that step's tasks in
all (its ranks, also for an MPI step whose tasks are mpirun and its daemons), for
``fusesched sacct``'s step rows (their NTasks and AllocCPUS); empty for a job's own tasks and
for the tasks stored before.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-09
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("step_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("step_tasks", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("step_tasks")
        batch.drop_column("step_id")
