"""What goes into the core (events, past tense) and what comes out (decisions, imperative)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from fusesched.model.fast import fast_init
from fusesched.model.job import ArraySpec, Dependency, JobSpec, Placement, QoS
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.phases import JobPhase
from fusesched.model.reservation import Reservation
from fusesched.model.resources import Resources

if TYPE_CHECKING:
    from fusesched.core.devices import DeviceAssignment

# --------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class NodeAdded:
    node: NodeSpec
    state: NodeState = NodeState.UP


@dataclass(frozen=True, slots=True)
class NodeStateChanged:
    node: str
    state: NodeState
    reason: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class JobSubmitted:
    job: JobSpec


@dataclass(frozen=True, slots=True)
class JobCancelRequested:
    job_id: str
    reason: str = "cancelled by user"


@dataclass(frozen=True, slots=True)
class JobHoldRequested:
    """Keep a waiting job from starting until it is released (Slurm's ``scontrol hold``).
    A queued job leaves the queue (pending, ``held``); a job waiting for its dependencies
    stays pending once they are met. Holding a running or ended job is a ``ValueError``."""

    job_id: str
    reason: str = "held by user"


@dataclass(frozen=True, slots=True)
class EndedJobRequeueRequested:
    """Run an ended job (completed, failed, cancelled or timed out) again under its id, as
    Slurm's ``scontrol requeue`` of a finished batch job does: it queues again (``<ended> →
    queued``), one attempt more, its history kept. ``job``: its spec now (a core that no
    longer holds it, after a restart, takes it as new). A job that has not ended, or may not
    be requeued (``JobSpec.requeue`` False), is a ``ValueError`` (core/requeue.py)."""

    job: JobSpec
    reason: str = "requeued by user"


@dataclass(frozen=True, slots=True)
class JobUpdateRequested:
    """Change a job (Slurm's ``scontrol update``); the fields left ``None`` stay. A waiting
    job (queued, held, or waiting for its dependencies) may change its priority, QoS, time
    limit, name, queue (Slurm's partition), dependencies (``()`` clears them) and begin time,
    and takes its new place: in the queue, among the jobs waiting for their begin time, or
    waiting on its new dependencies. ``placement``: its placement as its new queue's route
    gives it (the live controller's federation; ``None``: kept). A running job may change
    only its time limit and its name: its estimated end moves with its limit, and a limit
    already passed stops it at once (a :class:`StopJob` whose exit counts as timed out).
    Anything else of a running job, any change of an ended job, and a change the job
    could not have been submitted with (an unknown queue, a dependency that is unknown or
    can never be met, a ``singleton`` without a name) is a ``ValueError`` that changes
    nothing (core/intake.py, core/job_rewire.py)."""

    job_id: str
    priority: int | None = None
    qos: QoS | None = None
    walltime_s: float | None = None
    name: str | None = None
    queue: str | None = None
    dependencies: tuple[Dependency, ...] | None = None
    begin_time: float | None = None
    placement: Placement | None = None


@dataclass(frozen=True, slots=True)
class JobReleaseRequested:
    """Let a held job start again: back into the queue (its place by the queue order, by its
    submit time for orders that count age; after what is left of a requeue's backoff), or on
    to wait for its dependencies."""

    job_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class JobExited:
    """All tasks of a running job ended; ``exit_code`` 0 means success.

    ``requeue``: the run failed for a reason outside the job (a node or GPU fault, a hang,
    a lost agent) and the shell's restart policy wants it queued again instead of ended:
    not on ``exclude_nodes``, and not before ``not_before`` (a backoff). A job the core asked
    to preempt (:class:`PreemptJob`) is requeued without the flag unless it exited 0.

    ``completing``: nodes where processes of the run still live (a job step's task that the
    shell kills after a grace): the run's booking there stays held until
    :class:`CompletingEnded` (Slurm's COMPLETING; core/completing.py).

    ``out_of_memory``: the kernel's OOM killer killed a process of the job's own tasks (its
    ``reason`` says so): the run failed even when it exited 0, as Slurm's job whose batch step
    had an oom-kill event ends ``OUT_OF_MEMORY``.
    """

    job_id: str
    exit_code: int = 0
    reason: str = ""
    timed_out: bool = False
    requeue: bool = False
    exclude_nodes: tuple[str, ...] = ()
    not_before: float = 0.0
    completing: tuple[str, ...] = ()
    out_of_memory: bool = False


@dataclass(frozen=True, slots=True)
class CompletingEnded:
    """The last processes of an ended run of the job on ``nodes`` are gone (or the shell
    gave up waiting for them): what the run still held there is free."""

    job_id: str
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JobCheckpointed:
    """A running job wrote a checkpoint at ``time`` (seen by the shell): preemption prefers
    victims that lose the least work since their last one."""

    job_id: str
    time: float


@dataclass(frozen=True, slots=True)
class AdoptedTask:
    """One task of an adopted job: its group, node and the GPUs it holds (by index; MIG
    instances by UUID), as its agent reports it. ``launched`` False: a task slot the job
    holds where nothing was launched (a batch job's other nodes, from its hostfile), whose
    GPUs are those of ``gpu_indices`` it finds free (the job's there, as its step tasks
    say), else any the node has free."""

    group: str
    node: str
    gpu_indices: tuple[int, ...] = ()
    gpu_uuids: tuple[str, ...] = ()
    launched: bool = True


@dataclass(frozen=True, slots=True)
class JobAdopted:
    """A job a previous controller started is still running (a restarted controller found
    its tasks on their agents): the core takes it as running where it is, since
    ``start_time``, without launching anything."""

    job: JobSpec
    tasks: tuple[AdoptedTask, ...]
    start_time: float


@dataclass(frozen=True, slots=True)
class ArrayRecalled:
    """A restarted controller's account of a job array whose members ended before the
    restart (the core no longer holds them): its indices and those members' end phases
    (member id → phase), so that dependencies on the array count them as ended."""

    array_id: str
    array: ArraySpec
    ended: Mapping[str, JobPhase] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EndedRuns:
    """Runs of jobs alike in what fair share charges them, all ended: their ``tenant``,
    ``queue`` and ``user`` (the account), the resources each job held in all (its spec's
    ``total``) and each run's ``(start, end)``."""

    tenant: str
    queue: str
    user: str
    total: Resources
    spans: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class UsageRecalled:
    """A restarted controller's account of the runs that ended before the restart (the core
    no longer holds them, and fair share remembered their usage), so that fair share charges
    them as it did while they ran (:mod:`fusesched.core.past_usage`)."""

    runs: tuple[EndedRuns, ...]


@dataclass(frozen=True, slots=True)
class NodeDatasets:
    """The datasets a node's local cache holds complete now (the whole set, replacing what
    was known); placement prefers nodes that hold a job's datasets."""

    node: str
    datasets: frozenset[str]


@dataclass(frozen=True, slots=True)
class ReservationSet:
    """An advance reservation was created (or replaced, by its name): see
    :mod:`fusesched.core.reservations` for what it does to the jobs. ``replaces``: it was
    changed (the reservation of its name must exist; its waiting jobs follow the change)."""

    reservation: Reservation
    replaces: bool = False


@dataclass(frozen=True, slots=True)
class ReservationDeleted:
    """An advance reservation was deleted before its end: its nodes are ordinary again, and
    the jobs waiting to run in it are rejected with ``reason``."""

    name: str
    reason: str = "deleted"


Event = (
    NodeAdded
    | NodeStateChanged
    | NodeDatasets
    | JobSubmitted
    | JobCancelRequested
    | JobHoldRequested
    | JobReleaseRequested
    | JobUpdateRequested
    | EndedJobRequeueRequested
    | JobExited
    | CompletingEnded
    | JobCheckpointed
    | JobAdopted
    | ArrayRecalled
    | UsageRecalled
    | ReservationSet
    | ReservationDeleted
)

# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class TaskPlacement:
    """``count`` tasks of a group (indices ``first_index`` onwards) bound to one node.

    ``resources`` is what *each* of those tasks holds there.
    """

    group: str
    node: str
    count: int
    first_index: int
    resources: Resources


@fast_init
@dataclass(frozen=True, slots=True, eq=False)
class GroupPlacement:
    """Where one task group went: ``counts[k]`` tasks on node ``nodes[k]``, in task order.

    The core hands over node rows and its (append-only) table of node names; the names are
    looked up only when someone reads :attr:`nodes`, so a simulation that never asks pays
    nothing for jobs spread over thousands of nodes.

    ``devices`` names the exact devices of every task (in task order) when the group asks for
    accelerators; the live shell turns them into ``CUDA_VISIBLE_DEVICES``.
    """

    group: str
    resources: Resources  # per task
    rows: npt.NDArray[np.int64]
    row_counts: npt.NDArray[np.int64]
    name_table: npt.NDArray[np.object_] = field(repr=False, compare=False)
    devices: DeviceAssignment | None = field(default=None, repr=False, compare=False)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.name_table[self.rows].tolist())

    @property
    def counts(self) -> tuple[int, ...]:
        """Tasks per node, aligned with :attr:`nodes`."""
        return tuple(self.row_counts.tolist())

    def _value(self) -> tuple[object, ...]:
        return (self.group, self.resources, self.nodes, self.counts)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupPlacement):
            return NotImplemented
        return self._value() == other._value()

    def __hash__(self) -> int:
        return hash(self._value())

    def tasks(self) -> tuple[TaskPlacement, ...]:
        out: list[TaskPlacement] = []
        first = 0
        for node, count in zip(self.nodes, self.counts, strict=True):
            out.append(TaskPlacement(self.group, node, count, first, self.resources))
            first += count
        return tuple(out)


@fast_init
@dataclass(frozen=True, slots=True)
class StartJob:
    """Launch every task of the job where the core placed it (the gang is complete)."""

    job_id: str
    groups: tuple[GroupPlacement, ...]
    backfilled: bool = False

    @property
    def tasks(self) -> tuple[TaskPlacement, ...]:
        return tuple(t for g in self.groups for t in g.tasks())

    @property
    def nodes(self) -> tuple[str, ...]:
        """Distinct nodes used, in placement order."""
        return tuple(dict.fromkeys(n for g in self.groups for n in g.nodes))


@dataclass(frozen=True, slots=True)
class StopJob:
    """Stop a running job (cancel, preemption); the shell reports the exit back."""

    job_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class PreemptJob:
    """Preempt a running job: send it its notice (SIGTERM or its configured signal), give it
    ``grace_s`` seconds to checkpoint, then stop it. The shell reports the exit as usual; the
    core puts the job back in the queue (``running → preempted → queued``)."""

    job_id: str
    reason: str
    grace_s: float


@dataclass(frozen=True, slots=True)
class RejectJob:
    """The job can never run on this cluster as configured (or its dependency failed)."""

    job_id: str
    reason: str


@fast_init
@dataclass(frozen=True, slots=True)
class ReserveJob:
    """Informational: the blocked head job holds a reservation starting at ``start_time``;
    ``nodes``, when the reservation is node-exact, are where it would start (a shell may
    stage the job's datasets there ahead of time)."""

    job_id: str
    start_time: float
    nodes: tuple[str, ...] = ()


Decision = StartJob | StopJob | PreemptJob | RejectJob | ReserveJob
