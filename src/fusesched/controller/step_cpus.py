"""Job steps' own CPUs and memory among their job's, as Slurm (21.08 on) gives a step only
what it asks for (``srun -c N``, ``--mem``, ``--mem-per-cpu``: agent/step_resources.py).

**CPUs.** Each task of a step gets ``cpus_per_task`` CPU ids of its own on its node
(the launch's ``cpu_ids``: the agent pins it, ``FUSESCHED_CPU_IDS``), none that a running
step's task holds, the job's own first (those its batch script is pinned to), then the
node's free ones, lowest first (:func:`pick_cpus`). The scheduler books a job CPU *counts*
per node; only the tasks it launches (a batch job's script) are given ids then. So a step's
ids come from the node's pool when it starts and go back to it as each of its tasks ends,
and the job's CPUs on a node count them: a step the job has too few for is refused
(:class:`StepNeverFits`), one the running steps leave too few for waits
(:class:`StepsBusy`). An ``--overlap`` step takes the first it asks for whoever holds them,
and holds them only against other jobs.

**Memory.** A step asking for memory (``memory``: bytes per node; 0: all of the job's
there) gives each of its tasks on a node an even share of its memory there as the launch's
limit (``memory_bytes``: the agent's cgroup ``memory.max``), counted against the job's
memory on the node beside the running steps' (:func:`pick_memory`). A step asking for none
is not limited and holds none, as before; neither is counted in a job that booked none.

What a task holds is its launch's own ``cpu_ids`` and ``memory_bytes``, read back from the
job's live tasks (:func:`held`), which a restarted controller has from its agents: nothing
is kept beside them. Tasks on a node whose agent lists no CPU ids (it cannot pin) are not
pinned and hold no CPUs, as the job's own tasks there.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fusesched.controller import late_exits
from fusesched.controller.job_steps import StepNeverFits, StepsBusy, share_of
from fusesched.controller.pools import Grant
from fusesched.model.resources import CPU, MEMORY, mebibytes

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob, LiveTask
    from fusesched.controller.service import Controller
    from fusesched.core.placement import Allocation

#: Whole CPUs and memory bytes per node.
NodeAmounts = dict[str, int]


@dataclass(frozen=True, slots=True)
class CpuMemAsk:
    """What a step asks for besides slots and GPUs: CPUs per task (None: as many as each of
    the job's tasks has, its component's in a heterogeneous job), and memory per node
    (bytes; 0: all of the job's there; None: not asked: no limit)."""

    cpus_per_task: int | None = None
    memory: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Held:
    """What the running steps' tasks hold on each node: CPU ids (with the steps holding
    them), and how many of them and how much memory (bytes) count against the job's."""

    cpus: dict[str, dict[int, int]]  # node -> cpu id -> step id
    counted: NodeAmounts
    memory: NodeAmounts


def allocated(
    allocation: Allocation | None, names: Sequence[str], groups: Iterable[str] | None = None
) -> tuple[NodeAmounts, NodeAmounts]:
    """The whole CPUs (a fraction rounded up) and memory bytes the scheduler's
    ``allocation`` of a job holds on each node (``names``: the nodes by row), of its task
    groups ``groups`` (None: all)."""
    if allocation is None:
        return {}, {}
    wanted = None if groups is None else set(groups)
    milli: NodeAmounts = {}
    memory: NodeAmounts = {}
    for shape, rows, counts in allocation.groups:
        if wanted is not None and shape.name not in wanted:
            continue
        for row, count in zip(rows.tolist(), counts.tolist(), strict=True):
            node = names[row]
            milli[node] = milli.get(node, 0) + shape.resources.get(CPU) * count
            memory[node] = memory.get(node, 0) + shape.resources.get(MEMORY) * count
    return {node: -(-m // 1000) for node, m in milli.items()}, memory


def held(tasks: Iterable[LiveTask], components: Collection[int] | None = None) -> Held:
    """What the running (non-``--overlap``) steps' tasks among ``tasks`` hold; what counts
    is what those on a heterogeneous job's ``components`` hold (None: all of them), each
    component's CPUs and memory being its own."""
    cpus: dict[str, dict[int, int]] = {}
    counted: NodeAmounts = {}
    memory: NodeAmounts = {}
    for task in tasks:
        share = share_of(task.launch.env) if task.remote and task.state != "exited" else None
        if share is None or share.overlap:
            continue
        ids = cpus.setdefault(task.node, {})
        ids.update(dict.fromkeys(task.launch.cpu_ids, share.step_id))
        on = {group for group, _ in share.het} or {0}
        if components is None or on & set(components):
            counted[task.node] = counted.get(task.node, 0) + len(task.launch.cpu_ids)
            memory[task.node] = memory.get(task.node, 0) + (task.launch.memory_bytes or 0)
    return Held(cpus, counted, memory)


def task_cpus(
    shares: Iterable[tuple[int, Iterable[tuple[str, int]]]],
    per_task: Mapping[int, int],
    cpus_per_task: int | None,
    nodes: Collection[str],
) -> dict[str, list[int]]:
    """The CPUs each task of a step asks for on each of ``nodes``, in rank (component)
    order: ``cpus_per_task``, else its component's CPUs per task (``per_task``; none given:
    0); its tasks there: ``shares`` (per component, tasks per node)."""
    out: dict[str, list[int]] = {}
    for group, slots in shares:
        for node, count in slots:
            if node in nodes:
                out.setdefault(node, []).extend([cpus_per_task or per_task.get(group, 0)] * count)
    return out


def pick_cpus(
    job: Mapping[str, int],
    own: Mapping[str, Sequence[int]],
    free: Mapping[str, Sequence[int]],
    asked: Mapping[str, int],
    overlap: bool,
    holding: Mapping[str, Mapping[int, int]],
    counted: Mapping[str, int] | None = None,
) -> dict[str, tuple[int, ...]]:
    """The CPU ids a step asking ``asked`` per node gets: on each node, of the job's own
    (``own``: its tasks' there) then the node's free ones (``free``), lowest first, none
    that the running steps hold (``holding``: id -> step; an ``--overlap`` step: whoever
    holds them). :class:`StepNeverFits` when the job has fewer CPUs there (``job``),
    :class:`StepsBusy` when the running steps hold too many of them now (``counted``: how
    many count against ``job``, a heterogeneous job's component's; None: all they hold); no
    ids (not pinned) on a node with too few left for it."""
    for node, count in asked.items():
        if count > job[node]:
            raise StepNeverFits(
                f"the step asks for {count} CPU(s) on {node}; the job has {job[node]} there"
            )
    picked: dict[str, tuple[int, ...]] = {}
    full: dict[str, str] = {}
    steps: set[int] = set()
    for node, count in asked.items():
        taken = {} if overlap else holding.get(node, {})
        mine = sorted(set(own.get(node, ())) | (set(holding.get(node, {})) if overlap else set()))
        order = mine + sorted(set(free.get(node, ())) - set(mine))
        left = [i for i in order if i not in taken]
        using = len(taken) if counted is None or overlap else counted.get(node, 0)
        if using + count > job[node]:
            full[node] = f"{node} has {using} of {job[node]} CPUs in use"
            steps.update(taken.values())
        # fewer ids left than the job has CPUs (other jobs' tasks pinned to more than they
        # booked, fractions rounded up; an agent listing fewer ids than CPUs): not pinned
        # there, as a task the pool cannot pin (controller/pools.py), rather than waiting
        picked[node] = tuple(sorted(left[:count])) if count <= len(left) else ()
    if full:
        said = "; ".join(full.values())
        by = ", ".join(map(str, sorted(steps)))
        raise StepsBusy(f"Requested nodes are busy: {said} (by step(s) {by})")
    return picked


def step_cpus_memory(
    ctl: Controller,
    live: LiveJob,
    shares: Sequence[tuple[int, Sequence[tuple[str, int]]]],
    tasks: Collection[str],
    ask: CpuMemAsk,
    overlap: bool,
) -> tuple[dict[str, tuple[int, ...]], NodeAmounts | None, dict[str, list[int]]]:
    """The CPU ids and memory (None: not asked for) a step of ``live`` gets on each of the
    nodes it starts ``tasks`` on, and each of its tasks' CPUs there (:func:`task_cpus`), of
    its share of each of the job's components (``shares``: component, tasks per node; a job
    that is not heterogeneous: component 0, the whole job). CPUs are given where the job's
    CPUs there are known and the node's agent lists CPU ids (it can pin), and without ``-c``
    to a component with whole CPUs per task; the ids picked are taken from the node's pool.
    The caller holds the lock."""
    record = ctl.core.jobs.get(live.id)
    allocation = record.allocation if record is not None else None
    het = live.request.hetjob
    groups = [live.request.groups[g].name for g, _ in shares] if het else None
    job_cpus, job_memory = allocated(allocation, ctl.core.cluster.names, groups)
    now = held(live.tasks.values(), [g for g, _ in shares] if het else None)
    shapes = (
        {shape.name: shape.resources for shape, _, _ in allocation.groups} if allocation else {}
    )
    milli = {
        g: shapes[live.request.groups[g].name].get(CPU)
        for g, _ in shares
        if live.request.groups[g].name in shapes
    }
    each = {g: m // 1000 for g, m in milli.items() if m % 1000 == 0}  # (a fraction: not pinned)
    sizes = {
        node: per_task
        for node, per_task in task_cpus(shares, each, ask.cpus_per_task, tasks).items()
        if job_cpus.get(node) and ctl.nodes[node].inventory.cpu_ids
    }
    pinned = {node: sum(per_task) for node, per_task in sizes.items()}
    own = {  # (its script's, and its steps' tasks': an --overlap one's held against no step)
        node: [
            i
            for t in live.tasks.values()
            if t.node == node and t.state != "exited"
            for i in t.grant.cpu_ids
        ]
        for node in pinned
    }
    free = {node: ctl.nodes[node].pool.cpu_free for node in pinned}
    cpus = pick_cpus(job_cpus, own, free, pinned, overlap, now.cpus, now.counted)
    memory = None
    if ask.memory is not None:
        asked = {node: ask.memory[node] for node in tasks}
        memory = pick_memory(job_memory, asked, overlap, now.memory)
    for node, ids in cpus.items():
        ctl.nodes[node].pool.claim(Grant(ids))
    return cpus, memory, sizes


def pick_memory(
    job: Mapping[str, int], asked: Mapping[str, int], overlap: bool, holding: Mapping[str, int]
) -> NodeAmounts:
    """The memory (bytes) a step asking ``asked`` per node (0: all of the job's there) gets
    on each node, beside the running steps' (``holding``; not counted for an ``--overlap``
    step, nor on a node where the job booked none: ``job``). :class:`StepNeverFits` when the
    job has less there, :class:`StepsBusy` when the running steps hold too much now."""
    out: NodeAmounts = {}
    full: list[str] = []
    for node, count in asked.items():
        has = job.get(node, 0)
        want = count or has
        if has and want > has:
            raise StepNeverFits(
                f"the step asks for {_mib(want)} of memory on {node}; the job has {_mib(has)} there"
            )
        if has and not overlap and holding.get(node, 0) + want > has:
            full.append(f"{node} has {_mib(holding[node])} of {_mib(has)} memory in use")
        out[node] = want
    if full:
        raise StepsBusy(f"Requested nodes are busy: {'; '.join(full)}")
    return out


def _mib(amount: int) -> str:
    return f"{mebibytes(amount)}M"


def task_share(ids: Sequence[int], sizes: Sequence[int], tasks: int, local: int) -> tuple[int, ...]:
    """The ``local``-th of ``tasks`` tasks' own share of its step's CPU ids ``ids`` on their
    node: ``sizes[local]`` of them where ``sizes`` gives each task's (a heterogeneous step's
    components' may differ), else an even share (an MPI step's one mpirun: all), the last
    task taking what is left over (none is left held by no task)."""
    if len(sizes) == tasks and sum(sizes) == len(ids):
        start = sum(sizes[:local])
        return tuple(ids[start : start + sizes[local]])
    each = len(ids) // tasks
    return tuple(ids[local * each : None if local == tasks - 1 else (local + 1) * each])


def returned(ctl: Controller, task: LiveTask, live: LiveJob) -> Grant:
    """What of ``task``'s grant goes back to its node's pool as it ends: its CPU ids that no
    other live task of its job there holds (a step's task may share its script's, and an
    ``--overlap`` step others'), nor a task of an earlier run still dying there (a job
    restarted in place: late_exits.py); a remote task's devices are the job's, not its own."""
    others: Collection[int] = late_exits.cpus_held(
        live.tasks.values(), task.node, skip=lambda t: t is task
    )
    if ctl.outliving and task.grant.cpu_ids:
        others = {*others, *late_exits.held_cpus(ctl, task.node, None)}
    cpus = tuple(i for i in task.grant.cpu_ids if i not in others)
    if task.remote:
        return Grant(cpus)
    return Grant(cpus, task.grant.gpu_indices, task.grant.gpu_uuids)


def release_unended(ctl: Controller, tasks: Iterable[LiveTask]) -> None:
    """The controller forgets a job's tasks that have not ended (the job ended, or restarts
    in place: its remote tasks; requeued while it waited for adoption: its own too, with
    their devices): their kill is on its way, and their exit counts no more in their job.
    Those still running on a node keep their CPU ids until their exit, written when it
    comes (controller/late_exits.py); the others' go back to their nodes' pools now."""
    tasks = list(tasks)
    late_exits.forgotten(ctl, tasks)
    for task in tasks:
        node = ctl.nodes.get(task.node)
        if ctl.outliving.get(task.launch.task_id) is task:
            continue
        if task.state != "exited" and node is not None:  # (a remote task's devices: the job's)
            node.pool.give(Grant(task.grant.cpu_ids) if task.remote else task.grant, node.inventory)
