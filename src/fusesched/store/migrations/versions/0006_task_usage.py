"""Task usage: what each task used (CPU time, peak memory, GPU utilisation), for efficiency reports.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("cpu_seconds", sa.Double(), nullable=True))
        batch.add_column(sa.Column("max_rss_bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("gpu_util_mean", sa.Double(), nullable=True))
        batch.add_column(sa.Column("max_gpu_memory_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("max_gpu_memory_bytes")
        batch.drop_column("gpu_util_mean")
        batch.drop_column("max_rss_bytes")
        batch.drop_column("cpu_seconds")
