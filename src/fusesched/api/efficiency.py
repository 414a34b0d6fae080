"""A job's efficiency (Slurm's ``seff``): what it used against what it asked for, as
``GET /v1/jobs/{id}/efficiency`` answers it (docs/LIVE.md, "Job efficiency").

:func:`job_efficiency` is pure: the job's stored row and tasks (ended tasks carry what they
used), the usage so far of its running tasks (the controller's memory,
:mod:`fusesched.controller.task_usage`) and the time. What was not measured is ``None`` and
``notes`` says why.

* CPUs allocated: the job's task groups' ``cpu`` × replicas; CPU efficiency = CPU time used
  ÷ (elapsed × CPUs allocated).
* Memory: the requests' ``memory`` × replicas against the sum of the tasks' peak resident
  memory (an upper bound of the job's peak: the tasks' peaks need not coincide).
* GPUs: the requests' GPUs (shares as fractions), the tasks' mean GPU utilisation
  (time-weighted, averaged over the tasks by elapsed time × GPUs) and the sum of their peak
  GPU memory.

The job's current run is reported: tasks of earlier runs (a requeued job) are left out, and
the notes count them. Helper tasks a running job starts (mpirun's daemons) count toward the
job's CPU time and memory; they hold no allocation of their own. A batch-script job (``sbatch``
scripts, MPI jobs: one process, the script, for a group of several replicas) has one task row
for its group: that task stands for the group's whole allocation (every replica's cores,
memory and GPUs), so its own efficiency compares with what the job holds, not with one
replica's share.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from fusesched.controller.task_usage import TaskUsage
from fusesched.model.job import TaskGroup
from fusesched.model.resources import CPU, GPU, GPU_MILLI, MEMORY, QuantityError, Resources
from fusesched.store.records import JobDetail, JobRow, JobState, TaskRow
from fusesched.submit.task_group import TaskGroupRequest

__all__ = ["JobEfficiency", "TaskEfficiency", "job_efficiency"]

#: Where the notes point users whose jobs were too short to be sampled.
SAMPLING_HINT = "agents sample their tasks every sample_interval_s, 10 s by default"

#: A running task whose first sample (in this controller) came this long after its start was
#: tallied from then on (the controller restarted meanwhile): its peaks cover only the rest.
PARTIAL_AFTER_S = 60.0


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class TaskEfficiency(_View):
    task_id: str
    group: str
    node: str | None = None
    state: str
    start_time: float | None = None
    end_time: float | None = None
    elapsed_s: float | None = None
    cpus: float | None = None  # allocated cores (None: a helper task, with no allocation)
    cpu_seconds: float | None = None
    cpu_efficiency_pct: float | None = None
    memory_bytes: int | None = None  # requested (None: none requested)
    max_rss_bytes: int | None = None
    memory_efficiency_pct: float | None = None
    gpus: float = 0.0
    gpu_util_mean: float | None = None  # percent, time-weighted
    max_gpu_memory_bytes: int | None = None
    sampled: bool = False  # whether any of its agent's samples were taken
    live: bool = False  # still running: values so far, from the controller's memory


class JobEfficiency(_View):
    id: str
    name: str = ""
    user: str = ""
    state: str
    phase: str
    exit_code: int | None = None
    pool: str | None = None
    nodes: list[str] = []
    start_time: float | None = None
    end_time: float | None = None
    elapsed_s: float | None = None  # None: not started
    tasks_count: int = 0  # tasks its groups ask for
    cpus: float = 0.0  # allocated cores, all tasks together
    cpu_seconds: float | None = None
    cpu_efficiency_pct: float | None = None
    memory_bytes: int | None = None  # requested, all tasks together (None: none requested)
    max_rss_bytes: int | None = None  # the sum of the tasks' peaks
    memory_efficiency_pct: float | None = None
    gpus: float = 0.0
    gpu_util_mean: float | None = None
    max_gpu_memory_bytes: int | None = None  # the sum of the tasks' peaks
    sampled: bool = False
    notes: list[str] = []  # why values are missing, what is counted
    tasks: list[TaskEfficiency] = []


def _groups(row: JobRow) -> dict[str, TaskGroup] | None:
    """The job's task groups by name, from its stored request (None: unreadable). Read from
    the stored data as it is, not validated again as a new submission would be."""
    default = TaskGroupRequest.model_fields["name"].default
    try:
        out: dict[str, TaskGroup] = {}
        for g in row.request["groups"]:
            name = str(g.get("name", default))
            resources = Resources.parse(g["resources"])
            out[name] = TaskGroup(name, int(g.get("replicas", 1)), resources)
        return out
    except (KeyError, TypeError, AttributeError, ValueError, QuantityError):
        return None


def _pct(used: float | None, available: float | None) -> float | None:
    if used is None or not available or available <= 0:
        return None
    return round(100.0 * used / available, 2)


def _gpus(group: TaskGroup | None) -> float:
    if group is None:
        return 0.0
    return float(group.resources.get(GPU, 0)) + group.resources.get(GPU_MILLI, 0) / 1000.0


def _sum(values: Sequence[float | int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(sum(known)) if known else None


def _task(
    row: TaskRow, group: TaskGroup | None, live: TaskUsage | None, now: float, replicas: int = 1
) -> TaskEfficiency:
    """One task's figures; ``replicas``: how many replicas' allocation it stands for (a
    batch script's one task stands for its whole group)."""
    end = row.end_time
    if row.start_time is None:
        elapsed = None
    else:
        elapsed = max(0.0, (end if end is not None else now) - row.start_time)
    stored = row.cpu_seconds is not None or row.max_rss_bytes is not None
    if stored or live is None:
        cpu, rss = row.cpu_seconds, row.max_rss_bytes
        util, gpu_mem = row.gpu_util_mean, row.max_gpu_memory_bytes
    else:
        cpu, rss = live.cpu_seconds, live.max_rss_bytes
        util, gpu_mem = live.gpu_util_mean, live.max_gpu_memory_bytes
    cpus = None if group is None else group.resources.get(CPU, 0) * replicas / 1000.0
    memory = None if group is None else group.resources.get(MEMORY, 0) * replicas or None
    return TaskEfficiency(
        task_id=row.task_id,
        group=row.group,
        node=row.node,
        state=row.state.value,
        start_time=row.start_time,
        end_time=end,
        elapsed_s=elapsed,
        cpus=cpus,
        cpu_seconds=cpu,
        cpu_efficiency_pct=_pct(cpu, None if elapsed is None or cpus is None else elapsed * cpus),
        memory_bytes=memory,
        max_rss_bytes=rss,
        memory_efficiency_pct=_pct(rss, memory),
        gpus=_gpus(group) * replicas,
        gpu_util_mean=None if util is None else round(util, 2),
        max_gpu_memory_bytes=gpu_mem,
        sampled=stored or live is not None,
        live=not stored and live is not None,
    )


def _gpu_mean(tasks: Sequence[TaskEfficiency]) -> float | None:
    """The tasks' utilisation averaged by elapsed time × GPUs (the GPU-time they stand for)."""
    weighted = weights = 0.0
    readings = []
    for t in tasks:
        if t.gpu_util_mean is None:
            continue
        readings.append(t.gpu_util_mean)
        weight = (t.elapsed_s or 0.0) * (t.gpus or 1.0)
        weighted += t.gpu_util_mean * weight
        weights += weight
    if not readings:
        return None
    return round(weighted / weights if weights > 0 else sum(readings) / len(readings), 2)


def _stands_for(groups: Mapping[str, TaskGroup], rows: Counter[str], row: TaskRow) -> int:
    """How many replicas' allocation task ``row`` stands for: its group's all, when it is
    that group's only task of several replicas (a batch script's); else one."""
    group = groups.get(row.group)
    if group is None or group.replicas <= 1 or rows[row.group] != 1:
        return 1
    return group.replicas


def _in_run(row: TaskRow, job: JobRow) -> bool:
    """Whether the task belongs to the job's current run (not to one before a requeue)."""
    if job.state is JobState.PENDING:
        return False  # waiting again: its earlier runs are over
    start = job.start_time
    if start is None or row.start_time is None or row.end_time is None:
        return True
    return not (row.start_time < start and row.end_time <= start)


def job_efficiency(
    detail: JobDetail,
    live: Mapping[str, TaskUsage],
    now: float,
    external_pools: Collection[str] = (),
) -> JobEfficiency:
    """``detail``'s job as ``seff`` sees it; ``live``: the usage so far of its running tasks;
    ``now``: the controller's time (the elapsed time of what still runs); ``external_pools``:
    the pools an external cluster runs (no agent of ours samples their jobs)."""
    job = detail.job
    groups = _groups(job)
    notes: list[str] = []
    if groups is None:
        notes.append("its stored request could not be read: what it asked for is unknown")
        groups = {}
    run = [t for t in detail.tasks if _in_run(t, job)]
    earlier = len(detail.tasks) - len(run)
    rows = Counter(t.group for t in run)
    tasks = [
        _task(t, groups.get(t.group), live.get(t.task_id), now, _stands_for(groups, rows, t))
        for t in run
    ]
    started = job.start_time is not None and job.state is not JobState.PENDING
    elapsed = None
    if started and job.start_time is not None:
        end = job.end_time if job.end_time is not None else now
        elapsed = max(0.0, end - job.start_time)
    cpus = sum(g.resources.get(CPU, 0) * g.replicas for g in groups.values()) / 1000.0
    memory = sum(g.resources.get(MEMORY, 0) * g.replicas for g in groups.values()) or None
    gpus = sum(_gpus(g) * g.replicas for g in groups.values())
    sampled = [t for t in tasks if t.sampled]
    cpu_seconds = _sum([t.cpu_seconds for t in sampled])
    rss = _sum([t.max_rss_bytes for t in sampled])
    gpu_mem = _sum([t.max_gpu_memory_bytes for t in sampled])
    external = job.pool in external_pools or any(t.external_id for t in detail.tasks)
    notes.extend(_notes(job, started, external, tasks, sampled, gpus, earlier))
    notes.extend(_partial(run, live))
    return JobEfficiency(
        id=job.id,
        name=job.name,
        user=job.user,
        state=job.state.value,
        phase=job.phase,
        exit_code=job.exit_code,
        pool=job.pool,
        nodes=list(job.nodes),
        start_time=job.start_time if started else None,
        end_time=job.end_time if started else None,
        elapsed_s=elapsed,
        tasks_count=sum(g.replicas for g in groups.values()),
        cpus=cpus,
        cpu_seconds=cpu_seconds,
        cpu_efficiency_pct=_pct(cpu_seconds, None if elapsed is None else elapsed * cpus),
        memory_bytes=memory,
        max_rss_bytes=None if rss is None else int(rss),
        memory_efficiency_pct=_pct(rss, memory),
        gpus=gpus,
        gpu_util_mean=_gpu_mean(sampled),
        max_gpu_memory_bytes=None if gpu_mem is None else int(gpu_mem),
        sampled=bool(sampled),
        notes=notes,
        tasks=tasks,
    )


def _partial(run: Sequence[TaskRow], live: Mapping[str, TaskUsage]) -> list[str]:
    """Notes for running tasks tallied only since a controller restart."""
    late = []
    for row in run:
        usage = live.get(row.task_id)
        if usage is None or usage.since is None or row.start_time is None:
            continue
        if row.cpu_seconds is None and usage.since - row.start_time > PARTIAL_AFTER_S:
            late.append((row.task_id, usage.since - row.start_time))
    if not late:
        return []
    shown = ", ".join(f"{task_id} ({gap:.0f} s)" for task_id, gap in late[:5])
    more = f" and {len(late) - 5} more" if len(late) > 5 else ""
    return [
        f"tallied only since the controller restarted (first sample that long after the task's "
        f"start): {shown}{more}; their peak memory, GPU memory and GPU utilisation cover only "
        "that time (CPU time is complete); a controller keeps the peaks in memory only"
    ]


def _notes(
    job: JobRow,
    started: bool,
    external: bool,
    tasks: Sequence[TaskEfficiency],
    sampled: Sequence[TaskEfficiency],
    gpus: float,
    earlier: int,
) -> list[str]:
    """Why values are missing, and what the totals cover."""
    notes: list[str] = []
    if earlier:
        notes.append(f"{earlier} task(s) of earlier runs (before a requeue) are not counted")
    if not started:
        if job.state is JobState.PENDING:
            notes.append("the job has not started (it waits): nothing used yet")
        else:
            notes.append(f"the job never ran ({job.state.value}): nothing was used")
        return notes
    if external and not sampled:
        notes.append(
            f"run by the external pool {job.pool!r}: its usage is not sampled here "
            "(that cluster's own accounting has it)"
        )
        return notes
    if not sampled:
        if job.state is JobState.RUNNING:
            notes.append(f"not sampled yet ({SAMPLING_HINT})")
        else:
            notes.append(
                "not sampled: its agents' sampling is off, or they are older ones, which "
                f"send no sample at a task's exit ({SAMPLING_HINT})"
            )
        return notes
    if len(sampled) < len(tasks):
        missing = len(tasks) - len(sampled)
        notes.append(f"{missing} of {len(tasks)} tasks not sampled: totals cover the others")
    if any(t.live for t in sampled):
        notes.append("running: values so far, as of the tasks' latest samples")
    if all(t.max_rss_bytes is None for t in sampled):
        notes.append(
            "memory peak not measured: no sample saw the tasks' processes running (shorter "
            f"than the sampling interval, {SAMPLING_HINT}), and their peak was no higher than "
            "their agent's own, from which the kernel's count cannot tell it"
        )
    if gpus > 0 and all(t.gpu_util_mean is None for t in sampled):
        notes.append("GPU utilisation not reported by the agents (no GPU readings)")
    return notes
