"""A job step of a heterogeneous job (``srun --het-group=N[,M…]`` inside its batch script),
without I/O: which components it runs on (:func:`het_groups`), its tasks over their hostfiles
(:func:`place_components`) and the allocation its tasks see (:func:`het_step_env`).

A heterogeneous job's batch script has ``SLURM_HET_SIZE`` (controller/hetjob_env.py): then a
step runs on component 0 unless ``--het-group`` names others, as Slurm's ``srun``. Each
component's tasks are placed over that component's own hostfile (``-n``, else the
component's ``SLURM_NTASKS_HET_GROUP_<n>``; ``-N``, else its ``SLURM_NNODES_HET_GROUP_<n>``):
the options apply to each component named. A step on several components is one step: its
tasks are ranked in component order (one ``MPI_COMM_WORLD``, as Slurm's), and its tasks see
those components' allocation as the job's (:func:`het_step_env`: ``SLURM_JOB_NODELIST``,
``SLURM_TASKS_PER_NODE``…), each task with its own component's CPUs per task
(:func:`het_rank_env`) and what those components hold on its node (:func:`het_node_env`:
``SLURM_CPUS_ON_NODE``, ``SLURM_MEM_PER_NODE``, ``SLURM_GPUS_ON_NODE``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from fusesched.agent.step_plan import StepError, StepOptions, StepTask, place, step_shape
from fusesched.hostlist import compress_hostlist, tasks_per_node
from fusesched.model.resources import mebibytes

#: How many components the job has (none for a job that is not heterogeneous: Slurm's).
HET_SIZE_ENV = "SLURM_HET_SIZE"
#: What Slurm appends to a component's variables: ``_HET_GROUP_<n>``.
HET_SUFFIX = "_HET_GROUP_"
#: Each component's memory (bytes) and whole GPUs per task, with :data:`HET_SUFFIX` and its
#: number (fusesched's own: controller/hetjob_env.py), which :func:`het_node_env` reads.
MEM_PER_TASK_ENV = "FUSESCHED_MEM_PER_TASK"
GPUS_PER_TASK_ENV = "FUSESCHED_GPUS_PER_TASK"
#: What a job holds on a task's node (controller/launchenv.py): a step's own, per node.
NODE_SHARE_VARS = frozenset({"SLURM_CPUS_ON_NODE", "SLURM_MEM_PER_NODE", "SLURM_GPUS_ON_NODE"})

#: (component, its slots per node in the step) for each component a step runs on.
HetShares = list[tuple[int, dict[str, int]]]


def het_hostfile_name(index: int) -> str:
    """Component ``index``'s hostfile in the batch task's folder, beside the job's own
    (written by the controller at the start: controller/hetjob_env.py)."""
    return f"fusesched.het{index}.hostfile"


def het_groups(asked: tuple[int, ...] | None, environ: Mapping[str, str]) -> tuple[int, ...] | None:
    """The components a step runs on: ``asked`` (``--het-group``), else component 0, in a
    heterogeneous job; None in a job that is not one (where ``--het-group=0`` is the job
    itself). :class:`StepError` for a component the job does not have."""
    text = environ.get(HET_SIZE_ENV, "")
    size = int(text) if text.isascii() and text.isdigit() and int(text) > 0 else None
    job = environ.get("SLURM_JOB_ID") or environ.get("FUSESCHED_JOB_ID") or "this job"
    if size is None:
        if asked is None or asked == (0,):
            return None
        shown = ",".join(map(str, asked))
        raise StepError(
            f"--het-group={shown}: job {job} is not a heterogeneous job (its one component is 0)"
        )
    groups = asked if asked is not None else (0,)
    missing = [g for g in groups if g >= size]
    if missing:
        raise StepError(
            f"--het-group: job {job} has no component {missing[0]} (its components: 0-{size - 1})"
        )
    return groups


def place_components(
    options: StepOptions,
    environ: Mapping[str, str],
    hosts: Mapping[int, Sequence[tuple[str, int]]],
) -> tuple[list[StepTask], list[str], HetShares]:
    """The step's tasks over the components ``hosts`` names (component → its hostfile's
    ``(node, slots)``, in the order to rank them), its warnings, and its share of each."""
    tasks: list[StepTask] = []
    warnings: list[str] = []
    shares: HetShares = []
    for group, own in hosts.items():
        view = {
            name: environ[f"{name}{HET_SUFFIX}{group}"]
            for name in ("SLURM_NTASKS", "SLURM_NNODES")
            if f"{name}{HET_SUFFIX}{group}" in environ
        }
        ntasks, nodes = step_shape(options, view, len(own))
        try:
            placed, said = place(own, ntasks, nodes, options.ntasks_per_node)
        except StepError as exc:
            raise StepError(f"component {group}: {exc}") from None
        warnings.extend(f"component {group}: {w}" for w in said)
        counts: dict[str, int] = {}
        for task in placed:
            counts[task.node] = counts.get(task.node, 0) + 1
        shares.append((group, counts))
        tasks.extend(placed)
    return _ranked(tasks), warnings, shares


def _ranked(tasks: Sequence[StepTask]) -> list[StepTask]:
    """``tasks`` (each component's, in order) as one step's: ranks in order, nodes indexed
    by first appearance, local ranks among the step's tasks on each node."""
    order: dict[str, int] = {}
    size: dict[str, int] = {}
    for task in tasks:
        order.setdefault(task.node, len(order))
        size[task.node] = size.get(task.node, 0) + 1
    seen: dict[str, int] = {}
    out: list[StepTask] = []
    for rank, task in enumerate(tasks):
        local = seen.get(task.node, 0)
        seen[task.node] = local + 1
        out.append(
            replace(
                task,
                rank=rank,
                node_index=order[task.node],
                local_rank=local,
                local_size=size[task.node],
            )
        )
    return out


def het_step_env(
    hosts: Mapping[int, Sequence[tuple[str, int]]], environ: Mapping[str, str]
) -> dict[str, str]:
    """The allocation a heterogeneous job's step's tasks see as the job's: that of the
    components it runs on (``hosts``), as Slurm's ``srun --het-group`` gives it — their
    nodes (``SLURM_JOB_NODELIST``…), tasks per node (``SLURM_TASKS_PER_NODE``) and CPUs per
    node (``SLURM_JOB_CPUS_PER_NODE``, from each component's ``_HET_GROUP_<n>``, when each
    gives it), in the same node order, and the CPUs per task when they all have the same
    (else each task gets its own: :func:`het_rank_env`)."""
    tasks: dict[str, int] = {}
    cpus: dict[str, int] | None = {}
    for group, own in hosts.items():
        for node, slots in own:
            tasks[node] = tasks.get(node, 0) + slots
        per_node = _component_cpus(environ, group, own, "")
        if cpus is None or per_node is None:
            cpus = None
            continue
        for (node, _), count in zip(own, per_node, strict=True):
            cpus[node] = cpus.get(node, 0) + count
    nodes = list(tasks)
    env = {
        "SLURM_JOB_NODELIST": compress_hostlist(nodes),
        "SLURM_NODELIST": compress_hostlist(nodes),
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_TASKS_PER_NODE": tasks_per_node([tasks[node] for node in nodes]),
    }
    if cpus:
        env["SLURM_JOB_CPUS_PER_NODE"] = tasks_per_node([cpus.get(node, 0) for node in nodes])
    per_task = {_cpus_per_task(environ, group) for group in hosts}
    if len(per_task) == 1 and (value := per_task.pop()) is not None:
        env["SLURM_CPUS_PER_TASK"] = value
    return env


def het_rank_env(shares: HetShares, environ: Mapping[str, str]) -> list[dict[str, str]]:
    """Each task's own variables in a heterogeneous job's step, by rank (the tasks of each
    component in ``shares``, in order): its component's CPUs per task
    (``SLURM_CPUS_PER_TASK_HET_GROUP_<n>``), as Slurm's ``srun`` gives each component's
    tasks theirs (``-c`` still wins)."""
    out: list[dict[str, str]] = []
    for group, counts in shares:
        value = _cpus_per_task(environ, group)
        own = {"SLURM_CPUS_PER_TASK": value} if value is not None else {}
        out.extend(dict(own) for _ in range(sum(counts.values())))
    return out


def het_node_env(
    hosts: Mapping[int, Sequence[tuple[str, int]]], environ: Mapping[str, str]
) -> dict[str, dict[str, str]] | None:
    """What the components a step runs on (``hosts``) hold on each of their nodes, as the
    controller gives a job's tasks on theirs (controller/launchenv.py): ``SLURM_CPUS_ON_NODE``
    (whole CPUs, as the components' ``SLURM_JOB_CPUS_PER_NODE_HET_GROUP_<n>``),
    ``SLURM_MEM_PER_NODE`` (MiB) and ``SLURM_GPUS_ON_NODE``, each only when they hold some:
    a task on node ``b`` of components 1 and 2 gets theirs on ``b``, not the script's
    (component 0's, on its node). None when the controller does not say each component's
    memory and GPUs per task (older than them): the tasks keep the script's."""
    totals: dict[str, list[int]] = {}  # node → [CPUs, memory, GPUs]
    for group, own in hosts.items():
        needs = [_number(environ, f"{name}{HET_SUFFIX}{group}") for name in _PER_TASK]
        cpus = _component_cpus(environ, group, own, "0")
        if None in needs or cpus is None:
            return None
        for (node, slots), count in zip(own, cpus, strict=True):
            held = totals.setdefault(node, [0, 0, 0])
            held[0] += count
            for k, amount in enumerate(needs, start=1):
                held[k] += slots * (amount or 0)
    some_cpus = any(held[0] for held in totals.values())
    out: dict[str, dict[str, str]] = {}
    for node, (cpus_here, memory, gpus) in totals.items():
        env = out[node] = {"SLURM_CPUS_ON_NODE": str(cpus_here)} if some_cpus else {}
        if memory:
            env["SLURM_MEM_PER_NODE"] = str(mebibytes(memory))
        if gpus:
            env["SLURM_GPUS_ON_NODE"] = str(gpus)
    return out


#: What :func:`het_node_env` reads of each component's task, in its totals' order.
_PER_TASK = (MEM_PER_TASK_ENV, GPUS_PER_TASK_ENV)


def _component_cpus(
    environ: Mapping[str, str], group: int, own: Sequence[tuple[str, int]], missing: str
) -> list[int] | None:
    """Component ``group``'s whole CPUs on each node of its hostfile ``own`` (its
    ``SLURM_JOB_CPUS_PER_NODE_HET_GROUP_<n>``; the controller gives none for a component of
    no CPUs: ``missing`` then stands for each node's); None where that cannot be read so."""
    text = environ.get(f"SLURM_JOB_CPUS_PER_NODE{HET_SUFFIX}{group}")
    per_node = _counts(text if text is not None else f"{missing}(x{len(own)})")
    return per_node if per_node is not None and len(per_node) == len(own) else None


def _number(environ: Mapping[str, str], name: str) -> int | None:
    text = environ.get(name, "")
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def _cpus_per_task(environ: Mapping[str, str], group: int) -> str | None:
    text = environ.get(f"SLURM_CPUS_PER_TASK{HET_SUFFIX}{group}", "")
    return text if _whole(text) else None


def _counts(text: str) -> list[int] | None:
    """Slurm's ``2(x3),1`` form as one count per node (``[2, 2, 2, 1]``); None for text
    that does not read as one."""
    out: list[int] = []
    for item in text.split(","):
        count, times, rest = item.partition("(x")
        if not _whole(count) or (times and not (rest.endswith(")") and _whole(rest[:-1]))):
            return None
        repeat = int(rest[:-1]) if times else 1
        if repeat > 100_000:
            return None
        out.extend([int(count)] * repeat)
    return out


def _whole(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 9
