"""Small fluent builders and drivers for scheduling-core tests.

    node("n1").cpu(8).mem("32Gi").gpu(4).label("zone", "a").build()
    job("j1").tasks(4, cpu=2).walltime(600).at(0).selector(zone="a").build()

``run_script`` feeds a SchedulerCore a scripted list of timed events and returns every decision
with the time it was made; ``simulate`` is a tiny event loop that also plays the cluster (jobs
exit after their true runtime). Both only use the core's public entry points.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    Decision,
    Event,
    JobCancelRequested,
    JobExited,
    JobSubmitted,
    NodeAdded,
    NodeStateChanged,
    RejectJob,
    ReserveJob,
    StartJob,
    StopJob,
)
from fusesched.model.job import (
    ArraySpec,
    Dependency,
    DependencyKind,
    JobSpec,
    JobType,
    LabelOp,
    LabelRequirement,
    Placement,
    PreferredTerm,
    QoS,
    TaskGroup,
)
from fusesched.model.node import NodeSpec, NodeState
from fusesched.model.phases import JobPhase
from fusesched.model.resources import GPU, MEMORY, Resources
from fusesched.policies.registry import CoreConfig

Quantity = str | int | float

# ----------------------------------------------------------------------------- nodes


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._name = name
        self._capacity: dict[str, Quantity] = {}
        self._labels: dict[str, str] = {}

    def cpu(self, amount: Quantity) -> NodeBuilder:
        return self.res("cpu", amount)

    def mem(self, amount: Quantity) -> NodeBuilder:
        return self.res(MEMORY, amount)

    def gpu(self, amount: Quantity) -> NodeBuilder:
        return self.res(GPU, amount)

    def res(self, name: str, amount: Quantity) -> NodeBuilder:
        self._capacity[name] = amount
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._labels[key] = value
        return self

    def labels(self, **labels: str) -> NodeBuilder:
        self._labels.update(labels)
        return self

    def build(self) -> NodeSpec:
        return NodeSpec(self._name, Resources.parse(self._capacity), self._labels)


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def nodes(count: int, cpu: Quantity = 4, prefix: str = "n", **labels: str) -> list[NodeSpec]:
    """``count`` identical CPU-only nodes named ``n0, n1, …``."""
    return [node(f"{prefix}{i}").cpu(cpu).labels(**labels).build() for i in range(count)]


# ----------------------------------------------------------------------------- jobs


def _req(key: str, op: LabelOp | str, values: Iterable[str]) -> LabelRequirement:
    return LabelRequirement(key, LabelOp(op), tuple(values))


class JobBuilder:
    def __init__(self, job_id: str) -> None:
        self._id = job_id
        self._groups: list[TaskGroup] = []
        self._fields: dict[str, object] = {}
        self._selector: dict[str, str] = {}
        self._required: list[LabelRequirement] = []
        self._anti: list[LabelRequirement] = []
        self._preferred: list[PreferredTerm] = []
        self._max_per_node: int | None = None
        self._deps: list[Dependency] = []

    def tasks(self, count: int, name: str | None = None, **resources: Quantity) -> JobBuilder:
        """Add a task group of ``count`` tasks, each asking ``resources`` (e.g. cpu=2,
        mem="1Gi", gpu=1; other names via ``**{"fpga": 1}``)."""
        group = (
            name if name is not None else ("main" if not self._groups else f"g{len(self._groups)}")
        )
        self._groups.append(TaskGroup(group, count, Resources.parse(resources)))
        return self

    def walltime(self, seconds: float | None) -> JobBuilder:
        return self._set("walltime_s", seconds)

    def user(self, user: str) -> JobBuilder:
        return self._set("user", user)

    def checkpoint_every(self, seconds: float) -> JobBuilder:
        return self._set("checkpoint_interval_s", seconds)

    def at(self, submit_time: float) -> JobBuilder:
        return self._set("submit_time", float(submit_time))

    def priority(self, priority: int) -> JobBuilder:
        return self._set("priority", priority)

    def qos(self, qos: QoS | str) -> JobBuilder:
        return self._set("qos", QoS(qos))

    def queue(self, queue: str) -> JobBuilder:
        return self._set("queue", queue)

    def type(self, job_type: JobType | str) -> JobBuilder:
        return self._set("type", JobType(job_type))

    def min_member(self, count: int) -> JobBuilder:
        return self._set("min_member", count)

    def array(
        self, start: int, stop: int, step: int = 1, max_parallel: int | None = None
    ) -> JobBuilder:
        return self._set("array", ArraySpec(start, stop, step, max_parallel))

    def selector(self, labels: Mapping[str, str] | None = None, **more: str) -> JobBuilder:
        self._selector.update(labels or {})
        self._selector.update(more)
        return self

    def require(self, key: str, op: LabelOp | str, *values: str) -> JobBuilder:
        self._required.append(_req(key, op, values))
        return self

    def avoid(self, key: str, op: LabelOp | str, *values: str) -> JobBuilder:
        """A hard anti-affinity term: nodes matching it are excluded."""
        self._anti.append(_req(key, op, values))
        return self

    def prefer(self, key: str, op: LabelOp | str, *values: str, weight: int = 1) -> JobBuilder:
        self._preferred.append(PreferredTerm(_req(key, op, values), weight))
        return self

    def max_per_node(self, count: int) -> JobBuilder:
        self._max_per_node = count
        return self

    def after_ok(self, *job_ids: str) -> JobBuilder:
        self._deps += [Dependency(DependencyKind.AFTER_OK, j) for j in job_ids]
        return self

    def after_any(self, *job_ids: str) -> JobBuilder:
        self._deps += [Dependency(DependencyKind.AFTER_ANY, j) for j in job_ids]
        return self

    def _set(self, key: str, value: object) -> JobBuilder:
        self._fields[key] = value
        return self

    def build(self) -> JobSpec:
        groups = self._groups or [TaskGroup("main", 1, Resources.parse({"cpu": 1}))]
        placement = Placement(
            node_selector=self._selector,
            required=tuple(self._required),
            anti_affinity=tuple(self._anti),
            preferred=tuple(self._preferred),
            max_tasks_per_node=self._max_per_node,
        )
        return JobSpec(
            id=self._id,
            task_groups=tuple(groups),
            placement=placement,
            dependencies=tuple(self._deps),
            **self._fields,  # type: ignore[arg-type]
        )


def job(job_id: str) -> JobBuilder:
    return JobBuilder(job_id)


# ----------------------------------------------------------------------------- scripted runs


def make_core(
    cluster: Iterable[NodeSpec], config: CoreConfig | None = None, **settings: object
) -> SchedulerCore:
    """A core with ``cluster`` registered (UP) at time 0; settings go to CoreConfig."""
    if config is None:
        config = CoreConfig(**settings)  # type: ignore[arg-type]
    core = SchedulerCore(config)
    for spec in cluster:
        core.handle(NodeAdded(spec), 0.0)
    return core


@dataclass
class Run:
    """What a scripted run produced: the core and every decision with its time."""

    core: SchedulerCore
    decisions: list[tuple[float, Decision]] = field(default_factory=list)

    def of(self, kind: type[Decision]) -> list[Decision]:
        return [d for _, d in self.decisions if isinstance(d, kind)]

    def starts(self) -> dict[str, StartJob]:
        return {d.job_id: d for d in self.of(StartJob)}  # type: ignore[union-attr]

    def start_times(self) -> dict[str, float]:
        return {d.job_id: t for t, d in self.decisions if isinstance(d, StartJob)}

    def rejected(self) -> dict[str, str]:
        return {d.job_id: d.reason for d in self.of(RejectJob)}  # type: ignore[union-attr]

    def stopped(self) -> list[str]:
        return [d.job_id for d in self.of(StopJob)]  # type: ignore[union-attr]

    def reservations(self) -> list[tuple[str, float]]:
        return [(d.job_id, d.start_time) for d in self.of(ReserveJob)]  # type: ignore[union-attr]

    def phase(self, job_id: str) -> JobPhase:
        return self.core.jobs[job_id].phase

    def step(self, now: float, *events: Event | Sequence[Event]) -> list[Decision]:
        """One ``SchedulerCore.step`` at ``now``; events may be given singly or as lists."""
        flat: list[Event] = []
        for item in events:
            flat.extend(item if isinstance(item, Sequence) else [item])
        out = self.core.step(now, flat)
        self.decisions += [(now, d) for d in out]
        return out


ScriptItem = tuple[float, Event | Sequence[Event]]


def run_script(
    cluster: Iterable[NodeSpec],
    script: Iterable[ScriptItem],
    config: CoreConfig | None = None,
    **settings: object,
) -> Run:
    """Run a core over ``script``: (time, event or events) items, one ``step`` per item."""
    run = Run(make_core(cluster, config, **settings))
    for now, events in script:
        run.step(now, events)
    return run


# convenient event constructors for scripts
def submit(*specs: JobSpec) -> list[Event]:
    return [JobSubmitted(s) for s in specs]


def exited(job_id: str, code: int = 0, timed_out: bool = False, reason: str = "") -> JobExited:
    return JobExited(job_id, exit_code=code, reason=reason, timed_out=timed_out)


def cancel(job_id: str, reason: str = "cancelled by user") -> JobCancelRequested:
    return JobCancelRequested(job_id, reason)


def node_state(name: str, state: NodeState | str) -> NodeStateChanged:
    return NodeStateChanged(name, NodeState(state))


# ----------------------------------------------------------------------------- event loop


def simulate(
    cluster: Iterable[NodeSpec],
    jobs: Iterable[tuple[JobSpec, float]],
    config: CoreConfig | None = None,
    stop_at: float | None = None,
    **settings: object,
) -> Run:
    """Play the cluster: submit each (spec, true runtime) at its submit time, report its exit
    when the runtime has passed. At one instant exits come before arrivals, then one cycle.
    ``stop_at``: stop before the first instant after it (running jobs stay running)."""
    run = Run(make_core(cluster, config, **settings))
    pending = sorted(jobs, key=lambda item: item[0].submit_time)
    runtime = {spec.id: rt for spec, rt in pending}
    ends: list[tuple[float, int, str]] = []
    seq = 0
    i = 0
    while i < len(pending) or ends:
        now = min(
            ends[0][0] if ends else float("inf"),
            pending[i][0].submit_time if i < len(pending) else float("inf"),
        )
        if stop_at is not None and now > stop_at:
            break
        events: list[Event] = []
        while ends and ends[0][0] == now:
            events.append(JobExited(heapq.heappop(ends)[2]))
        while i < len(pending) and pending[i][0].submit_time == now:
            events.append(JobSubmitted(pending[i][0]))
            i += 1
        for decision in run.step(now, *events):
            if isinstance(decision, StartJob):
                seq += 1
                spec = run.core.jobs[decision.job_id].spec
                took = runtime[spec.array_parent or spec.id]  # array children: the parent's
                heapq.heappush(ends, (now + took, seq, decision.job_id))
    return run


class Clock:
    """A settable clock for a controller under test (starts at 1000 s)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def one_queue_tenancy(nominal: Mapping[str, int], **extra: object) -> dict[str, object]:
    """A tenancy configuration (``TenancyConfig.from_dict`` input) with one queue, ``lab`` →
    ``ml`` → ``train``, whose one flavour ``any`` covers the resources of ``nominal`` with
    those nominal quotas; ``extra`` adds top-level keys (``qos``, ``default_qos``…)."""
    flavour = {"name": "any", "resources": {r: {"nominal": n} for r, n in nominal.items()}}
    queue = {"name": "train", "flavors": [flavour]}
    return {
        "flavors": [{"name": "any", "resources": list(nominal)}],
        "organisations": [{"name": "lab", "tenants": [{"name": "ml", "queues": [queue]}]}],
        **extra,
    }


def two_tenant_tenancy(nominal: Mapping[str, int]) -> dict[str, object]:
    """A tenancy configuration (``TenancyConfig.from_dict`` input) with two tenants of
    organisation ``lab``: ``ml`` with queue ``train`` and ``phys`` with queue ``sim``, each
    queue with the nominal quotas ``nominal`` in the one flavour ``any``."""
    flavour = {"name": "any", "resources": {r: {"nominal": n} for r, n in nominal.items()}}
    tenants = [
        {"name": tenant, "queues": [{"name": queue, "flavors": [flavour]}]}
        for tenant, queue in (("ml", "train"), ("phys", "sim"))
    ]
    return {
        "flavors": [{"name": "any", "resources": list(nominal)}],
        "organisations": [{"name": "lab", "tenants": tenants}],
    }
