"""Typed records that cross the store's boundary (never ORM instances).

``*Row`` records are what is written and what is read back: a row added with ``add_jobs`` and
read with ``get_job`` compares equal. ``*Change`` records name one row and the fields to
change; a field left at :data:`UNSET` is not touched (``None`` is a value: it clears the field).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum, StrEnum
from typing import Any, Final

from fusesched.model.node import NodeState
from fusesched.model.phases import JobPhase


class JobState(StrEnum):
    """The coarse state of a job or a task, as users see it (the core's phase is finer)."""

    PENDING = "Pending"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def finished(self) -> bool:
        return self not in UNFINISHED

    @classmethod
    def of_phase(cls, phase: JobPhase) -> JobState:
        """The state a job in the core's ``phase`` shows (queued and preempted are Pending)."""
        return _STATE_OF_PHASE[phase]

    @classmethod
    def parse(cls, value: str) -> JobState:
        """``value`` as a state; a ``ValueError`` that lists the legal states otherwise."""
        try:
            return cls(value)
        except ValueError:
            legal = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown job state {value!r}; expected one of {legal}") from None


UNFINISHED: Final = frozenset({JobState.PENDING, JobState.RUNNING})

_STATE_OF_PHASE: Final = {
    JobPhase.PENDING: JobState.PENDING,
    JobPhase.QUEUED: JobState.PENDING,
    JobPhase.PREEMPTED: JobState.PENDING,
    JobPhase.RUNNING: JobState.RUNNING,
    JobPhase.COMPLETED: JobState.COMPLETED,
    JobPhase.FAILED: JobState.FAILED,
    JobPhase.TIMEOUT: JobState.FAILED,
    JobPhase.CANCELLED: JobState.CANCELLED,
}


def node_state(value: str) -> NodeState:
    """``value`` as a node state; a ``ValueError`` that lists the legal states otherwise."""
    try:
        return NodeState(value)
    except ValueError:
        legal = ", ".join(s.value for s in NodeState)
        raise ValueError(f"unknown node state {value!r}; expected one of {legal}") from None


class Unset(Enum):
    """Type of :data:`UNSET`, the "leave this field alone" marker of ``*Change`` records."""

    UNSET = "UNSET"


UNSET: Final = Unset.UNSET


def _need(value: str, what: str) -> None:
    if not value:
        raise ValueError(f"{what} must not be empty")


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job. ``id`` is ``"1234"``, or ``"1234_7"`` for member 7 of array job ``"1234"``
    (whose id is then ``array_parent``); ``seq`` orders jobs by submission (unique).
    ``request`` is the submitted job request as JSON-able data; ``nodes`` the nodes it ran on."""

    id: str
    seq: int
    user: str
    state: JobState
    phase: str
    submit_time: float
    request: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""
    tenant: str = "default"
    queue: str = "default"
    type: str = "batch"
    reason: str = ""
    exit_code: int | None = None
    priority: int = 0
    start_time: float | None = None
    end_time: float | None = None
    nodes: tuple[str, ...] = ()
    array_parent: str | None = None
    pool: str | None = None  # the pool that ran it: a local pool's or an external cluster's
    energy_j: float | None = None  # what its last run drew (measured + estimated), joules
    energy_measured_j: float | None = None  # the part measured (GPU power), joules
    # the key of the submitting environment its request held, kept apart (the request read
    # back holds none: store/environments.py)
    env_id: str | None = None

    def __post_init__(self) -> None:
        _need(self.id, "a job id")
        if self.seq < 1:
            raise ValueError(f"job {self.id}: seq must be positive, got {self.seq}")
        object.__setattr__(self, "state", JobState.parse(self.state))
        object.__setattr__(self, "nodes", tuple(self.nodes))


@dataclass(frozen=True, slots=True)
class JobChange:
    """Fields of job ``id`` to change; :data:`UNSET` ones stay as they are."""

    id: str
    state: JobState | Unset = UNSET
    phase: str | Unset = UNSET
    reason: str | Unset = UNSET
    exit_code: int | Unset | None = UNSET
    priority: int | Unset = UNSET
    request: Mapping[str, Any] | Unset = UNSET  # the request as changed (scontrol update)
    start_time: float | Unset | None = UNSET
    end_time: float | Unset | None = UNSET
    nodes: tuple[str, ...] | Unset = UNSET
    pool: str | Unset | None = UNSET
    energy_j: float | Unset | None = UNSET
    energy_measured_j: float | Unset | None = UNSET
    name: str | Unset = UNSET  # (scontrol update Name=)
    queue: str | Unset = UNSET  # (scontrol update Partition=)

    def __post_init__(self) -> None:
        if self.state is not UNSET:
            object.__setattr__(self, "state", JobState.parse(self.state))
        if self.nodes is not UNSET:
            object.__setattr__(self, "nodes", tuple(self.nodes))

    def values(self) -> dict[str, Any]:
        """The fields that are set, by column name."""
        return _set_fields(self, key="id")


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One task of a job: ``task_id`` is ``"<job>.<group>.<index>"``, e.g. ``"1234.main.0"``.
    Tasks use the same five states as jobs; ``devices`` names the devices it holds."""

    task_id: str
    job_id: str
    group: str
    index: int
    state: JobState = JobState.PENDING
    node: str | None = None
    exit_code: int | None = None
    pid: int | None = None
    start_time: float | None = None
    end_time: float | None = None
    devices: tuple[str, ...] = ()
    log_path: str | None = None
    external_id: str | None = None  # the external cluster's id for the job this task stands for
    # what it used, from its agent's samples (None: not sampled), written when it ends
    cpu_seconds: float | None = None
    max_rss_bytes: int | None = None
    gpu_util_mean: float | None = None  # percent, time-weighted
    max_gpu_memory_bytes: int | None = None
    # the job step (srun) it belongs to; None: the job's own task, or a helper of no step
    step_id: int | None = None
    # that step's tasks in all (srun -n: its share of the job's slots); None: no step's, a
    # step's mpirun's daemon (which holds no slot), or stored before
    step_tasks: int | None = None
    # that step's name (srun -J, else its command's); None: no step's, or stored before
    step_name: str | None = None
    # why it ended, as its agent said (the OOM killer, …); None: nothing said, or not ended
    reason: str | None = None

    def __post_init__(self) -> None:
        _need(self.task_id, "a task id")
        object.__setattr__(self, "state", JobState.parse(self.state))
        object.__setattr__(self, "devices", tuple(self.devices))


@dataclass(frozen=True, slots=True)
class TaskChange:
    """Fields of task ``task_id`` to change; :data:`UNSET` ones stay as they are."""

    task_id: str
    state: JobState | Unset = UNSET
    node: str | Unset | None = UNSET
    exit_code: int | Unset | None = UNSET
    pid: int | Unset | None = UNSET
    start_time: float | Unset | None = UNSET
    end_time: float | Unset | None = UNSET
    devices: tuple[str, ...] | Unset = UNSET
    log_path: str | Unset | None = UNSET
    external_id: str | Unset | None = UNSET
    cpu_seconds: float | Unset | None = UNSET
    max_rss_bytes: int | Unset | None = UNSET
    gpu_util_mean: float | Unset | None = UNSET
    max_gpu_memory_bytes: int | Unset | None = UNSET
    reason: str | Unset | None = UNSET

    def __post_init__(self) -> None:
        if self.state is not UNSET:
            object.__setattr__(self, "state", JobState.parse(self.state))
        if self.devices is not UNSET:
            object.__setattr__(self, "devices", tuple(self.devices))

    def values(self) -> dict[str, Any]:
        return _set_fields(self, key="task_id")


@dataclass(frozen=True, slots=True)
class JobDetail:
    """A job with its tasks (in task-id order), as ``get_job`` and ``unfinished_jobs`` return."""

    job: JobRow
    tasks: tuple[TaskRow, ...] = ()


# --------------------------------------------------------------------------- nodes, events


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One registered node. ``capacity`` maps resource names to quantity strings (``"64Gi"``);
    ``devices`` describes its accelerators (one JSON object each). ``drain_reason``: why an
    operator drained it (None: not drained); a re-registration keeps it."""

    name: str
    address: str
    registered_at: float
    capacity: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    devices: tuple[Mapping[str, Any], ...] = ()
    state: NodeState = NodeState.UP
    last_heartbeat: float | None = None
    drain_reason: str | None = None

    def __post_init__(self) -> None:
        _need(self.name, "a node name")
        object.__setattr__(self, "state", node_state(self.state))
        object.__setattr__(self, "devices", tuple(self.devices))


@dataclass(frozen=True, slots=True)
class EventRow:
    """Something that happened, for the log: ``kind`` is past tense (``"JobStarted"``)."""

    time: float
    kind: str
    job_id: str | None = None
    node: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _need(self.kind, "an event kind")


class TokenKind(StrEnum):
    """What a token is for: a person (``user``), joining a node once (``join``), a joined
    node's own credential (``agent``) or one running job's helpers (``job``)."""

    USER = "user"
    JOIN = "join"
    AGENT = "agent"
    JOB = "job"


@dataclass(frozen=True, slots=True)
class TokenRow:
    """One API token. ``id`` is its public part; ``hash`` is the SHA-256 (hex) of the secret
    part — the secret itself is never stored. ``role`` is the person's role for user tokens
    (``user``, ``tenant-admin``, ``cluster-admin``); ``node`` binds join and agent tokens to a
    node name, ``job_id`` binds a job token to its job."""

    id: str
    hash: str
    kind: TokenKind
    created_at: float
    user: str = ""
    tenant: str = ""
    role: str = ""
    node: str | None = None
    job_id: str | None = None
    expires_at: float | None = None
    used_at: float | None = None
    revoked: bool = False

    def __post_init__(self) -> None:
        _need(self.id, "a token id")
        _need(self.hash, "a token hash")
        try:
            object.__setattr__(self, "kind", TokenKind(self.kind))
        except ValueError:
            legal = ", ".join(k.value for k in TokenKind)
            raise ValueError(f"unknown token kind {self.kind!r}; expected one of {legal}") from None
        object.__setattr__(self, "revoked", bool(self.revoked))

    def usable(self, now: float) -> bool:
        """Not revoked, not expired, and (for a join token) not used yet."""
        if self.revoked or (self.expires_at is not None and self.expires_at <= now):
            return False
        return not (self.kind is TokenKind.JOIN and self.used_at is not None)


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A stored event: an :class:`EventRow` plus its id (increasing in insertion order)."""

    id: int
    event: EventRow


def _set_fields(change: JobChange | TaskChange, key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(change):
        value = getattr(change, f.name)
        if f.name != key and value is not UNSET:
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out
