"""Energy per job: what its run drew (joules), and how much of it was measured.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("energy_j", sa.Double(), nullable=True))
        batch.add_column(sa.Column("energy_measured_j", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("energy_measured_j")
        batch.drop_column("energy_j")
