"""The tables, as typed SQLAlchemy declarative models (the store uses them through Core).

Migrations in ``migrations/versions`` create exactly this schema; a test compares the two.
Indexes serve the store's queries: a user's newest jobs ``(user, seq)``, jobs in a state
``(state, seq)``, a queue's jobs ``(queue, seq)``, the jobs ended since a time ``(end_time)``
and ``(user, end_time)``, the waiting array members by array and reason, a job's tasks and
events ``(job_id)``, a node's tasks ``(node, state)``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    and_,
    literal_column,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.elements import ColumnElement

from fusesched.store.records import JobState, TokenKind

#: JSON on SQLite, JSONB on PostgreSQL.
JsonType: Final = JSON().with_variant(JSONB(), "postgresql")
#: 64-bit ids; on SQLite the column must be INTEGER to alias the rowid (autoincrement).
BigId: Final = BigInteger().with_variant(Integer(), "sqlite")

STATES_SQL: Final = ", ".join(f"'{s.value}'" for s in JobState)
TOKEN_KINDS_SQL: Final = ", ".join(f"'{k.value}'" for k in TokenKind)
#: The condition of the partial index of unfinished jobs. A query must repeat it word for
#: word (see :func:`unfinished`) for SQLite to use that index.
UNFINISHED_SQL: Final = "state IN ('Pending', 'Running')"
#: The condition of the partial index of waiting array members (those that wait and never
#: started: squeue shows them as one row per array and reason); see :func:`waiting_members`.
WAITING_MEMBERS_SQL: Final = "state = 'Pending' AND array_parent IS NOT NULL AND start_time IS NULL"

#: Counter name of the job sequence in the ``counters`` table.
JOB_SEQ: Final = "job_seq"

NAMING: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar = {dict[str, Any]: JsonType, list[Any]: JsonType}


class Job(Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, unique=True)
    name: Mapped[str] = mapped_column(String)
    user: Mapped[str] = mapped_column(String)
    tenant: Mapped[str] = mapped_column(String)
    queue: Mapped[str] = mapped_column(String)
    type: Mapped[str] = mapped_column(String)
    state: Mapped[str] = mapped_column(String)
    phase: Mapped[str] = mapped_column(String)
    reason: Mapped[str] = mapped_column(String)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    priority: Mapped[int] = mapped_column(Integer)
    submit_time: Mapped[float] = mapped_column(Double)
    start_time: Mapped[float | None] = mapped_column(Double)
    end_time: Mapped[float | None] = mapped_column(Double)
    request: Mapped[dict[str, Any]]
    nodes: Mapped[list[Any]]
    array_parent: Mapped[str | None] = mapped_column(String)
    pool: Mapped[str | None] = mapped_column(String)  # the pool that ran it (federation)
    energy_j: Mapped[float | None] = mapped_column(Double)  # its runs' energy, joules
    energy_measured_j: Mapped[float | None] = mapped_column(Double)  # the measured part
    # the submitting environment it inherits, kept once in ``environments`` (its key)
    env_id: Mapped[str | None] = mapped_column(String)

    __table_args__ = (
        CheckConstraint(f"state IN ({STATES_SQL})", name="state"),
        Index(None, "user", "seq"),
        Index(None, "tenant", "seq"),
        Index(None, "state", "seq"),
        Index(None, "queue", "seq"),
        Index(None, "array_parent"),
        # A time window's jobs (sacct -S): those ended since, all users' or some users'.
        Index(None, "end_time"),
        Index(None, "user", "end_time"),
        # Only the few live jobs: what a restarting controller reads.
        Index(
            "ix_jobs_unfinished",
            "seq",
            sqlite_where=text(UNFINISHED_SQL),
            postgresql_where=text(UNFINISHED_SQL),
        ),
        # Only the waiting array members, by array and reason: what ``GET
        # /v1/jobs?combine_arrays=true`` groups (store/array_rows.py), read from the index
        # alone. ``state`` leads (one value here) so that SQLite prefers it to the state
        # index whatever its statistics say; ``start_time`` (null here) makes it covering.
        Index(
            "ix_jobs_waiting_members",
            "state",
            "array_parent",
            "reason",
            "seq",
            "id",
            "start_time",
            sqlite_where=text(WAITING_MEMBERS_SQL),
            postgresql_where=text(WAITING_MEMBERS_SQL),
        ),
    )


class Task(Base):
    __tablename__ = "tasks"

    task_id: Mapped[str] = mapped_column(String, primary_key=True)
    job_id: Mapped[str] = mapped_column(String, ForeignKey("jobs.id", ondelete="CASCADE"))
    group: Mapped[str] = mapped_column(String)
    index: Mapped[int] = mapped_column(Integer)
    node: Mapped[str | None] = mapped_column(String)
    state: Mapped[str] = mapped_column(String)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    pid: Mapped[int | None] = mapped_column(Integer)
    start_time: Mapped[float | None] = mapped_column(Double)
    end_time: Mapped[float | None] = mapped_column(Double)
    devices: Mapped[list[Any]]
    log_path: Mapped[str | None] = mapped_column(String)
    external_id: Mapped[str | None] = mapped_column(String)  # an external cluster's job id
    # what it used (agents' samples; None: not sampled): for efficiency reports
    cpu_seconds: Mapped[float | None] = mapped_column(Double)
    max_rss_bytes: Mapped[int | None] = mapped_column(BigInteger)
    gpu_util_mean: Mapped[float | None] = mapped_column(Double)  # percent, time-weighted
    max_gpu_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # the job step (srun) it belongs to; None: the job's own task, or a helper of no step
    step_id: Mapped[int | None] = mapped_column(Integer)
    # that step's tasks in all (srun -n: its share of the job's slots); None: no step's, a
    # step's mpirun's daemon (which holds no slot), or stored before
    step_tasks: Mapped[int | None] = mapped_column(Integer)
    # that step's name (srun -J, else its command's); None: no step's, or stored before
    step_name: Mapped[str | None] = mapped_column(String)
    # why it ended, as its agent said (the OOM killer, its walltime, …); None: nothing said,
    # not ended, or stored before
    reason: Mapped[str | None] = mapped_column(String)

    __table_args__ = (
        CheckConstraint(f"state IN ({STATES_SQL})", name="state"),
        Index(None, "job_id"),
        Index(None, "node", "state"),
    )


class Node(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    address: Mapped[str] = mapped_column(String)
    capacity: Mapped[dict[str, Any]]
    labels: Mapped[dict[str, Any]]
    devices: Mapped[list[Any]]
    state: Mapped[str] = mapped_column(String)
    last_heartbeat: Mapped[float | None] = mapped_column(Double)
    registered_at: Mapped[float] = mapped_column(Double)
    drain_reason: Mapped[str | None] = mapped_column(String)  # an operator's drain


class EventLog(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Double)
    kind: Mapped[str] = mapped_column(String)
    job_id: Mapped[str | None] = mapped_column(String)
    node: Mapped[str | None] = mapped_column(String)
    data: Mapped[dict[str, Any]]

    __table_args__ = (Index(None, "job_id"),)


class Environment(Base):
    """Submitting environments (what batch jobs inherit from their shell), each kept once
    under the SHA-256 of its canonical JSON (store/environments.py)."""

    __tablename__ = "environments"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    env: Mapped[dict[str, Any]]


class Counter(Base):
    """Named counters, allocated atomically (the job sequence is one)."""

    __tablename__ = "counters"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    value: Mapped[int] = mapped_column(BigInteger)


class Token(Base):
    """API tokens: the public id and the SHA-256 of the secret (never the secret)."""

    __tablename__ = "tokens"

    id: Mapped[str] = mapped_column(String, primary_key=True)
    hash: Mapped[str] = mapped_column(String)
    kind: Mapped[str] = mapped_column(String)
    user: Mapped[str] = mapped_column(String)
    tenant: Mapped[str] = mapped_column(String)
    role: Mapped[str] = mapped_column(String)
    node: Mapped[str | None] = mapped_column(String)
    job_id: Mapped[str | None] = mapped_column(String)
    created_at: Mapped[float] = mapped_column(Double)
    expires_at: Mapped[float | None] = mapped_column(Double)
    used_at: Mapped[float | None] = mapped_column(Double)
    revoked: Mapped[bool] = mapped_column(Boolean)

    __table_args__ = (
        CheckConstraint(f"kind IN ({TOKEN_KINDS_SQL})", name="kind"),
        Index(None, "job_id"),
        Index(None, "tenant", "kind"),
    )


class ReservationRow(Base):
    """Advance reservations (docs/RESERVATIONS.md): nodes set aside for a time window."""

    __tablename__ = "reservations"

    name: Mapped[str] = mapped_column(String, primary_key=True)
    nodes: Mapped[list[Any]]
    start_time: Mapped[float] = mapped_column(Double)
    end_time: Mapped[float] = mapped_column(Double)
    users: Mapped[list[Any]]
    tenants: Mapped[list[Any]]
    created_at: Mapped[float] = mapped_column(Double)
    created_by: Mapped[str] = mapped_column(String)


jobs: Final = cast(Table, Job.__table__)
tasks: Final = cast(Table, Task.__table__)
nodes: Final = cast(Table, Node.__table__)
events: Final = cast(Table, EventLog.__table__)
counters: Final = cast(Table, Counter.__table__)
environments: Final = cast(Table, Environment.__table__)
tokens: Final = cast(Table, Token.__table__)
reservations: Final = cast(Table, ReservationRow.__table__)


def waiting_members(*, array_parent: str | None = None) -> ColumnElement[bool]:
    """The condition of the partial index ``ix_jobs_waiting_members`` with literal values,
    word for word, as SQLite needs it to use that index; with ``array_parent``, that array's
    (its ``array_parent = …`` implies the index's ``IS NOT NULL``)."""
    parent = jobs.c.array_parent
    return and_(
        jobs.c.state == literal_column("'Pending'"),
        parent.is_not(None) if array_parent is None else parent == array_parent,
        jobs.c.start_time.is_(None),
    )


def unfinished(state: ColumnElement[str]) -> ColumnElement[bool]:
    """``state IN ('Pending', 'Running')`` with literal values, as the partial index has it."""
    return state.in_([literal_column("'Pending'"), literal_column("'Running'")])
