"""Initial schema: jobs, tasks, nodes, events and the job sequence counter.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

STATES = "state IN ('Pending', 'Running', 'Completed', 'Failed', 'Cancelled')"


def _json() -> sa.types.TypeEngine[Any]:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("tenant", sa.String(), nullable=False),
        sa.Column("queue", sa.String(), nullable=False),
        sa.Column("type", sa.String(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("phase", sa.String(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("submit_time", sa.Double(), nullable=False),
        sa.Column("start_time", sa.Double(), nullable=True),
        sa.Column("end_time", sa.Double(), nullable=True),
        sa.Column("request", _json(), nullable=False),
        sa.Column("nodes", _json(), nullable=False),
        sa.Column("array_parent", sa.String(), nullable=True),
        sa.CheckConstraint(STATES, name=op.f("ck_jobs_state")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("seq", name=op.f("uq_jobs_seq")),
    )
    op.create_index(op.f("ix_jobs_user_seq"), "jobs", ["user", "seq"])
    op.create_index(op.f("ix_jobs_state_seq"), "jobs", ["state", "seq"])
    op.create_index(op.f("ix_jobs_queue_seq"), "jobs", ["queue", "seq"])
    op.create_index(op.f("ix_jobs_array_parent"), "jobs", ["array_parent"])
    unfinished = sa.text("state IN ('Pending', 'Running')")
    op.create_index(
        "ix_jobs_unfinished",
        "jobs",
        ["seq"],
        sqlite_where=unfinished,
        postgresql_where=unfinished,
    )

    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=False),
        sa.Column("group", sa.String(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(), nullable=True),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("start_time", sa.Double(), nullable=True),
        sa.Column("end_time", sa.Double(), nullable=True),
        sa.Column("devices", _json(), nullable=False),
        sa.Column("log_path", sa.String(), nullable=True),
        sa.CheckConstraint(STATES, name=op.f("ck_tasks_state")),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_tasks_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", name=op.f("pk_tasks")),
    )
    op.create_index(op.f("ix_tasks_job_id"), "tasks", ["job_id"])
    op.create_index(op.f("ix_tasks_node_state"), "tasks", ["node", "state"])

    op.create_table(
        "nodes",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("address", sa.String(), nullable=False),
        sa.Column("capacity", _json(), nullable=False),
        sa.Column("labels", _json(), nullable=False),
        sa.Column("devices", _json(), nullable=False),
        sa.Column("state", sa.String(), nullable=False),
        sa.Column("last_heartbeat", sa.Double(), nullable=True),
        sa.Column("registered_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )

    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("time", sa.Double(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("job_id", sa.String(), nullable=True),
        sa.Column("node", sa.String(), nullable=True),
        sa.Column("data", _json(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index(op.f("ix_events_job_id"), "events", ["job_id"])

    counters = op.create_table(
        "counters",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_counters")),
    )
    op.bulk_insert(counters, [{"name": "job_seq", "value": 0}])


def downgrade() -> None:
    op.drop_table("counters")
    op.drop_index(op.f("ix_events_job_id"), table_name="events")
    op.drop_table("events")
    op.drop_table("nodes")
    op.drop_index(op.f("ix_tasks_node_state"), table_name="tasks")
    op.drop_index(op.f("ix_tasks_job_id"), table_name="tasks")
    op.drop_table("tasks")
    op.drop_index("ix_jobs_unfinished", table_name="jobs")
    op.drop_index(op.f("ix_jobs_array_parent"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_queue_seq"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_state_seq"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_user_seq"), table_name="jobs")
    op.drop_table("jobs")
