"""Indexes of the jobs by end time (all users', and each user's): what a time window's
listing (``GET /v1/jobs?since=…``, ``fusesched sacct``) walks instead of every job.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-08
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_end_time", "jobs", ["end_time"])
    op.create_index("ix_jobs_user_end_time", "jobs", ["user", "end_time"])


def downgrade() -> None:
    op.drop_index("ix_jobs_user_end_time", table_name="jobs")
    op.drop_index("ix_jobs_end_time", table_name="jobs")
