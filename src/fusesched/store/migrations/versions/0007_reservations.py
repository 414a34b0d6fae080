"""Advance reservations: nodes set aside for a time window (docs/RESERVATIONS.md).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    op.create_table(
        "reservations",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("nodes", json, nullable=False),
        sa.Column("start_time", sa.Double(), nullable=False),
        sa.Column("end_time", sa.Double(), nullable=False),
        sa.Column("users", json, nullable=False),
        sa.Column("tenants", json, nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_reservations")),
    )


def downgrade() -> None:
    op.drop_table("reservations")
