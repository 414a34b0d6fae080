"""Jobs: what a user asks for (``JobSpec``) in typed, frozen form.

A job is one or more *task groups* (replicas × per-task resources). The whole job is a gang:
it starts only when at least ``min_member`` tasks (default: all of them) are placed at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

from fusesched.model.fast import fast_init
from fusesched.model.phases import JobPhase
from fusesched.model.resources import Resources

if TYPE_CHECKING:
    from fusesched.core.topology import TopologyRequest


class JobType(StrEnum):
    AI_TRAIN = "ai-train"
    AI_INFER = "ai-infer"
    HPC = "hpc"
    BATCH = "batch"
    SERVICE = "service"


class QoS(StrEnum):
    GOLD = "gold"
    SILVER = "silver"
    BRONZE = "bronze"

    @property
    def rank(self) -> int:
        """Higher is more important."""
        return {QoS.GOLD: 2, QoS.SILVER: 1, QoS.BRONZE: 0}[self]


class LabelOp(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    """One condition on a node label, as in Kubernetes node affinity."""

    key: str
    op: LabelOp
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.op in (LabelOp.IN, LabelOp.NOT_IN) and not self.values:
            raise ValueError(f"label requirement on {self.key!r}: {self.op} needs values")
        if self.op in (LabelOp.EXISTS, LabelOp.DOES_NOT_EXIST) and self.values:
            raise ValueError(f"label requirement on {self.key!r}: {self.op} takes no values")

    def describe(self) -> str:
        """``key In [a, b]``, ``key Exists``."""
        values = f" [{', '.join(self.values)}]" if self.values else ""
        return f"{self.key} {self.op}{values}"

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op is LabelOp.IN:
            return value is not None and value in self.values
        if self.op is LabelOp.NOT_IN:
            return value is None or value not in self.values
        if self.op is LabelOp.EXISTS:
            return value is not None
        return value is None


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    """A soft affinity term: nodes matching ``requirement`` score ``weight`` more (or less)."""

    requirement: LabelRequirement
    weight: int


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job may run and how its tasks should lie.

    ``node_selector`` (exact label matches) and ``required`` are hard filters; ``preferred``
    terms add to the node score (a negative weight expresses soft anti-affinity);
    ``anti_affinity`` lists hard conditions nodes must *not* meet; ``max_tasks_per_node``
    spreads a gang's tasks (1 = one task per node); ``topology`` keeps the tasks within one
    domain of a node label (a switch, say), required or preferred; ``exclusive`` gives the job
    whole nodes (placed on idle nodes only; nothing else runs beside it); ``nodes`` runs the
    gang on exactly that many distinct nodes, each holding at least one task (Slurm's ``-N``;
    the job's :class:`JobSpec` checks it against its task count and ``max_tasks_per_node``).
    """

    node_selector: Mapping[str, str] = field(default_factory=dict)
    required: tuple[LabelRequirement, ...] = ()
    anti_affinity: tuple[LabelRequirement, ...] = ()
    preferred: tuple[PreferredTerm, ...] = ()
    max_tasks_per_node: int | None = None
    topology: TopologyRequest | None = None
    exclusive: bool = False  # whole nodes to itself: only idle nodes, shared with nobody
    nodes: int | None = None  # exactly this many distinct nodes (sbatch -N), None: any number

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_selector", MappingProxyType(dict(self.node_selector)))
        if self.max_tasks_per_node is not None and self.max_tasks_per_node < 1:
            raise ValueError("max_tasks_per_node must be at least 1")
        if self.nodes is not None and self.nodes < 1:
            raise ValueError("placement nodes (the node count) must be at least 1")

    def node_count_problem(self, tasks: int, min_member: int | None) -> str | None:
        """Why ``nodes`` cannot hold a job of ``tasks`` tasks (None: it can, or is not set):
        every node takes a task, and at most ``max_tasks_per_node`` each."""
        count = self.nodes
        if count is None:
            return None
        if count > tasks:
            return f"placement nodes ({count}) exceeds the number of tasks ({tasks})"
        per_node = self.max_tasks_per_node
        if per_node is not None and count * per_node < tasks:
            return (
                f"{tasks} tasks at most {per_node} per node (max_tasks_per_node) need "
                f"{-(-tasks // per_node)} nodes, but placement nodes is {count}"
            )
        if min_member is not None:
            return "placement nodes (an exact node count) cannot be given with min_member"
        return None

    @property
    def constrained(self) -> bool:
        """True when some node may be filtered out by labels."""
        return bool(self.node_selector or self.required or self.anti_affinity)

    def allows(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.node_selector.items()):
            return False
        if not all(req.matches(labels) for req in self.required):
            return False
        return not any(req.matches(labels) for req in self.anti_affinity)

    def cache_key(self) -> tuple[object, ...]:
        return (
            tuple(sorted(self.node_selector.items())),
            self.required,
            self.anti_affinity,
        )

    def describe(self) -> str:
        """Its label filters in a line (``pool=gpu, zone In [a, b], not host In [n1]``)."""
        terms = [f"{key}={value}" for key, value in self.node_selector.items()]
        terms += [req.describe() for req in self.required]
        terms += [f"not {req.describe()}" for req in self.anti_affinity]
        return ", ".join(terms)

    def labels_only(self) -> bool:
        """True when it holds label filters only (what a task group may add: no preferred
        terms, spreading, node count, topology or exclusivity)."""
        return not (
            self.preferred
            or self.max_tasks_per_node is not None
            or self.topology is not None
            or self.exclusive
            or self.nodes is not None
        )

    def joined(self, other: Placement) -> Placement:
        """This placement with ``other``'s label filters too (a node must meet both): its
        node selector becomes required ``In`` terms where a key is already selected."""
        selector = dict(self.node_selector)
        required = list(self.required)
        for key, value in other.node_selector.items():
            if selector.setdefault(key, value) != value:
                required.append(LabelRequirement(key, LabelOp.IN, (value,)))
        return replace(
            self,
            node_selector=selector,
            required=(*required, *other.required),
            anti_affinity=(*self.anti_affinity, *other.anti_affinity),
        )


NO_PLACEMENT = Placement()


@fast_init
@dataclass(frozen=True, slots=True)
class TaskGroup:
    """``replicas`` identical tasks, each needing ``resources``.

    ``placement``: label filters of this group's own (node selector, required and
    anti-affinity terms), which its tasks' nodes must meet besides the job's placement (a
    heterogeneous job's component with its own ``-C``, a Kubeflow replica type with its own
    ``nodeSelector``); None when it has none. Not hashed (a placement is not hashable):
    equal groups still hash equal.
    """

    name: str
    replicas: int
    resources: Resources
    placement: Placement | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"task group {self.name!r}: replicas must be at least 1")
        if not self.resources:
            raise ValueError(f"task group {self.name!r}: a task must request some resource")
        placement = self.placement
        if placement is not None:
            if not placement.labels_only():
                raise ValueError(
                    f"task group {self.name!r}: a group's placement holds label filters only "
                    "(node_selector, required, anti_affinity)"
                )
            if not placement.constrained:
                object.__setattr__(self, "placement", None)

    @property
    def total(self) -> Resources:
        return self.resources.scaled(self.replicas)


class DependencyKind(StrEnum):
    """When a job may start, relative to another (as Slurm's ``--dependency``)."""

    AFTER = "after"  # after the other job started (or ended without starting)
    AFTER_OK = "afterok"  # after the other job completed successfully
    AFTER_NOT_OK = "afternotok"  # after the other job ended in failure (failed, timed out…)
    AFTER_ANY = "afterany"  # after the other job ended, however
    # a member of an array after the member of the same index of the other array completed
    # successfully; on a job, or when the other array lacks that index, as afterok on it
    AFTER_CORR = "aftercorr"
    SINGLETON = "singleton"  # names no job: after the earlier ones of its name and user ended

    def met(self, phase: JobPhase) -> bool:
        """Whether another job in ``phase`` lets the dependent start (as far as it goes)."""
        if self is DependencyKind.AFTER:
            return phase is JobPhase.RUNNING or phase.terminal
        if self is DependencyKind.AFTER_OK or self is DependencyKind.AFTER_CORR:
            return phase is JobPhase.COMPLETED
        if self is DependencyKind.AFTER_NOT_OK:
            return phase.terminal and phase is not JobPhase.COMPLETED
        return phase.terminal  # afterany; a singleton waits on each earlier job as afterany

    def broken(self, phase: JobPhase) -> bool:
        """Whether another job in ``phase`` means the dependency can never be met."""
        if self is DependencyKind.AFTER_OK or self is DependencyKind.AFTER_CORR:
            return phase.terminal and phase is not JobPhase.COMPLETED
        if self is DependencyKind.AFTER_NOT_OK:
            return phase is JobPhase.COMPLETED
        return False


@dataclass(frozen=True, slots=True)
class Dependency:
    """``kind`` on job ``job_id``; a ``singleton`` names no job (``job_id`` is empty)."""

    kind: DependencyKind
    job_id: str = ""

    def __post_init__(self) -> None:
        if self.kind is DependencyKind.SINGLETON and self.job_id:
            raise ValueError(f"a singleton dependency names no job (got {self.job_id!r})")
        if self.kind is not DependencyKind.SINGLETON and not self.job_id:
            raise ValueError(f"an {self.kind} dependency needs the id of the job it waits for")


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """A job array: one job per index in ``range(start, stop + 1, step)``."""

    start: int
    stop: int
    step: int = 1
    max_parallel: int | None = None

    def __post_init__(self) -> None:
        if self.step < 1 or self.stop < self.start or self.start < 0:
            raise ValueError(f"invalid array range {self.start}-{self.stop}:{self.step}")
        if self.max_parallel is not None and self.max_parallel < 1:
            raise ValueError("array max_parallel must be at least 1")

    @property
    def indices(self) -> range:
        return range(self.start, self.stop + 1, self.step)


#: A dataset name: letters, digits and underscores, so that FUSESCHED_DATA_<NAME> is an
#: environment variable.
DATASET_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")


@dataclass(frozen=True, slots=True)
class Dataset:
    """A dataset a job reads: its name, where it lives on shared storage, how big it is.

    The job finds it at ``$FUSESCHED_DATA_<NAME>`` (the name upper-cased), a node-local cached
    copy or the shared path itself; the scheduler prefers nodes that cache it."""

    name: str
    source: str  # a path (or file:// URI) on shared storage
    size_bytes: int = 0

    def __post_init__(self) -> None:
        if not DATASET_NAME.fullmatch(self.name):
            raise ValueError(
                f"dataset name {self.name!r}: letters, digits and underscores, starting with "
                "a letter (at most 63)"
            )
        if not self.source:
            raise ValueError(f"dataset {self.name}: needs a source")
        if self.size_bytes < 0:
            raise ValueError(f"dataset {self.name}: size must not be negative")

    @property
    def env_name(self) -> str:
        return f"FUSESCHED_DATA_{self.name.upper()}"


@fast_init
@dataclass(frozen=True, slots=True)
class JobSpec:
    """What was asked for. Times are in seconds (simulated or wall clock)."""

    id: str
    task_groups: tuple[TaskGroup, ...]
    type: JobType = JobType.BATCH
    name: str = ""
    tenant: str = "default"
    queue: str = "default"
    user: str = ""
    priority: int = 0
    qos: QoS = QoS.SILVER
    walltime_s: float | None = None  # requested limit; also the scheduler's runtime estimate
    min_member: int | None = None  # gang size; None means every task
    placement: Placement = NO_PLACEMENT
    dependencies: tuple[Dependency, ...] = ()
    array: ArraySpec | None = None
    array_index: int | None = None  # set on the jobs an array expands into
    array_parent: str | None = None
    submit_time: float = 0.0
    checkpoint_interval_s: float | None = None  # the job checkpoints about this often
    datasets: tuple[Dataset, ...] = ()  # what it reads (data-aware placement, docs/DATA.md)
    begin_time: float | None = None  # not eligible to start before (sbatch --begin)
    reservation: str | None = None  # runs in this advance reservation (docs/RESERVATIONS.md)
    # cluster licenses it holds while it runs: (name, count) sorted by name (docs/LICENSES.md)
    licenses: tuple[tuple[str, int], ...] = ()
    # False: never back to the queue — a preemption cancels it (sbatch --no-requeue)
    requeue: bool = True
    # removed while waiting once it can no longer end by then (sbatch --deadline)
    deadline: float | None = None

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("a job needs an id")
        if self.datasets:
            data_names = [d.name.upper() for d in self.datasets]
            if len(set(data_names)) != len(data_names):
                raise ValueError(f"job {self.id}: dataset names must be unique (ignoring case)")
        if not self.task_groups:
            raise ValueError(f"job {self.id}: needs at least one task group")
        if len(self.task_groups) > 1:
            names = [g.name for g in self.task_groups]
            if len(set(names)) != len(names):
                raise ValueError(f"job {self.id}: task group names must be unique")
        if self.walltime_s is not None and not (0 < self.walltime_s < math.inf):
            raise ValueError(f"job {self.id}: walltime must be positive (a number of seconds)")
        if self.checkpoint_interval_s is not None and not (
            0 < self.checkpoint_interval_s < math.inf
        ):
            raise ValueError(f"job {self.id}: checkpoint interval must be a positive number")
        if self.begin_time is not None and not math.isfinite(self.begin_time):
            raise ValueError(f"job {self.id}: the begin time must be a finite number")
        if self.deadline is not None and not math.isfinite(self.deadline):
            raise ValueError(f"job {self.id}: the deadline must be a finite number")
        if self.min_member is not None and not 1 <= self.min_member <= self.task_count:
            raise ValueError(f"job {self.id}: min_member must be between 1 and {self.task_count}")
        if self.placement.nodes is not None:
            problem = self.placement.node_count_problem(self.task_count, self.min_member)
            if problem is not None:
                raise ValueError(f"job {self.id}: {problem}")

    @property
    def task_count(self) -> int:
        return sum(g.replicas for g in self.task_groups)

    @property
    def gang_size(self) -> int:
        return self.min_member if self.min_member is not None else self.task_count

    @property
    def total(self) -> Resources:
        out = Resources()
        for group in self.task_groups:
            out = out + group.total
        return out

    def expand_array(self) -> tuple[JobSpec, ...]:
        """One job per array index (ids ``<id>_<index>``), or the job itself."""
        if self.array is None or self.array_index is not None:
            return (self,)
        return tuple(self._member(i) for i in self.array.indices)

    def array_member(self, job_id: str) -> JobSpec:
        """This array's member ``job_id`` (``<id>_<index>``) as :meth:`expand_array` makes
        it, without making the others (``ValueError`` when the array has no such member)."""
        index = job_id.removeprefix(f"{self.id}_")
        number = int(index) if index.isascii() and index.isdigit() else -1
        if (
            self.array is None
            or self.array_index is not None
            or f"{self.id}_{number}" != job_id
            or number not in self.array.indices
        ):
            raise ValueError(f"job {job_id} is not a member of array {self.id}")
        return self._member(number)

    def _member(self, index: int) -> JobSpec:
        return replace(self, id=f"{self.id}_{index}", array_index=index, array_parent=self.id)
