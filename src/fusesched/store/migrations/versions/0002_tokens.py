"""API tokens (hashed) and the tenant index of jobs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

KINDS = "kind IN ('user', 'join', 'agent', 'job')"


def upgrade() -> None:
    op.create_table(
        "tokens",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("hash", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("tenant", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("node", sa.String(), nullable=True),
        sa.Column("job_id", sa.String(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("expires_at", sa.Double(), nullable=True),
        sa.Column("used_at", sa.Double(), nullable=True),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.CheckConstraint(KINDS, name=op.f("ck_tokens_kind")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tokens")),
    )
    op.create_index(op.f("ix_tokens_job_id"), "tokens", ["job_id"])
    op.create_index(op.f("ix_tokens_tenant_kind"), "tokens", ["tenant", "kind"])
    op.create_index(op.f("ix_jobs_tenant_seq"), "jobs", ["tenant", "seq"])


def downgrade() -> None:
    op.drop_index(op.f("ix_jobs_tenant_seq"), table_name="jobs")
    op.drop_index(op.f("ix_tokens_tenant_kind"), table_name="tokens")
    op.drop_index(op.f("ix_tokens_job_id"), table_name="tokens")
    op.drop_table("tokens")
