"""What ``fusesched sacct`` shows of what a step's (or a job's) tasks used, as Slurm's sacct:
sizes in its units (``MaxRSS``, ``AveRSS``, ``ReqMem``), energy (``ConsumedEnergy``) and the
per-task statistics of a step (``AveRSS``, ``AveCPU``, ``MinCPU``, the node and task of the
highest peak and of the least CPU time).

Pure functions. The statistics are over a row's tasks that were sampled (an agent's samples:
each task's CPU time and its peak RSS); a task's number is its place among the row's tasks
(0, 1, …; Slurm's task rank, which fusesched does not keep). A step's tasks are known from
the job's task views (``GET /v1/jobs?detail=true``), which sacct asks for only when a format
names one of :data:`PER_TASK`; the controller's step summaries carry only the highest peak and
the CPU time in all, so without them a step of several tasks shows only those.

A job's own row shows these figures only when the job has no step rows (its own tasks are
its work: ``fusesched run``, YAML jobs), as Slurm's shows a job's statistics only when it
does not list its step separately; otherwise they are on its steps' rows and blank on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple

from fusesched.model import step_summary as ss

#: The suffixes of Slurm's units (none, K, M, G, T, P).
_SUFFIXES: Final = ("", "K", "M", "G", "T", "P")
#: Fields that need each task's figures of a step (not only the step's summary).
PER_TASK: Final = frozenset(
    {"averss", "avecpu", "mincpu", "mincpunode", "mincputask", "maxrssnode", "maxrsstask"}
)


def slurm_size(value: float | None, unit: int = 0) -> str:
    """``value`` (in units of 1024**``unit``: 0 bytes, 2 MiB) as Slurm's sacct shows a
    size: in the largest unit that keeps it exact or exact to a half (``5M``, ``2.50M``,
    ``5000``: bytes that are no whole half kibibyte), ``0`` for none used, blank: unknown."""
    if value is None:
        return ""
    if int(value) == 0:
        return "0"
    while value >= 1024 and int(value) % 512 == 0 and unit < len(_SUFFIXES) - 1:
        value /= 1024
        unit += 1
    suffix = _SUFFIXES[unit]
    return f"{int(value)}{suffix}" if value == int(value) else f"{value:.2f}{suffix}"


@dataclass(frozen=True)
class Units:
    """sacct's ``--units=[KMGTP]`` (``spec``: the unit's place in K, M, G, T, P: 1 to 5) and
    ``--noconvert`` (each size in the unit it is kept in: bytes, ReqMem's mebibytes,
    joules); ``--units`` wins over ``--noconvert``, as Slurm's."""

    spec: int | None = None
    noconvert: bool = False


def parse_units(text: str) -> int:
    """``--units``' unit (its first letter, any case, as Slurm reads it) as its place in
    :data:`_SUFFIXES` (K: 1 … P: 5); a ``ValueError`` otherwise."""
    letter = text.strip()[:1].upper()
    if not letter or letter not in _SUFFIXES[1:]:
        raise ValueError(f"invalid unit type {text!r}: K, M, G, T or P")
    return _SUFFIXES.index(letter)


def convert(value: float, base: int, units: Units, kilo: int = 1024) -> str:
    """``value`` (in units of ``kilo``**``base``) as sacct shows it with ``units``: in the
    unit asked for (``--units``), else in its own (``--noconvert``); whole, or to the
    hundredth (``1.46M``), ``0`` for none."""
    if int(value) == 0:
        return "0"
    unit, amount = base, float(value)
    target = base if units.spec is None else units.spec
    while unit < target:
        amount, unit = amount / kilo, unit + 1
    while unit > target:
        amount, unit = amount * kilo, unit - 1
    suffix = _SUFFIXES[unit]
    return f"{int(amount)}{suffix}" if amount == int(amount) else f"{amount:.2f}{suffix}"


def energy(joules: float | None) -> str:
    """Joules as Slurm's ConsumedEnergy: in thousands (``12.35K``, ``3M``), ``0``: none."""
    if joules is None or int(joules) == 0:
        return "0"
    value, unit = float(joules), 0
    while value >= 1000 and unit < len(_SUFFIXES) - 1:
        value /= 1000
        unit += 1
    suffix = _SUFFIXES[unit]
    return f"{int(value)}{suffix}" if value == int(value) else f"{value:.2f}{suffix}"


class Sample(NamedTuple):
    """One task's figures: its node, CPU time and peak RSS (None: not sampled)."""

    node: str
    cpu_seconds: float | None
    max_rss_bytes: int | None


@dataclass(frozen=True)
class TaskStats:
    """A row's per-task figures (None or "": unknown)."""

    max_rss: int | None = None
    max_rss_node: str = ""
    max_rss_task: int | None = None
    ave_rss: int | None = None
    ave_cpu: float | None = None
    min_cpu: float | None = None
    min_cpu_node: str = ""
    min_cpu_task: int | None = None


def task_stats(samples: Sequence[Sample]) -> TaskStats:
    """The figures of a row run by the tasks ``samples`` (in order: a task's number is its
    place); the average RSS in whole bytes, as Slurm keeps it."""
    rss = [(int(s.max_rss_bytes), i) for i, s in enumerate(samples) if s.max_rss_bytes is not None]
    cpu = [(float(s.cpu_seconds), i) for i, s in enumerate(samples) if s.cpu_seconds is not None]
    stats = TaskStats()
    if rss:
        peak, at = max(rss, key=lambda pair: (pair[0], -pair[1]))  # (the first of equals)
        average = sum(r for r, _ in rss) // len(rss)
        stats = replace(
            stats, max_rss=peak, max_rss_node=samples[at].node, max_rss_task=at, ave_rss=average
        )
    if cpu:
        least, at = min(cpu)
        average_cpu = sum(c for c, _ in cpu) / len(cpu)
        stats = replace(
            stats,
            ave_cpu=average_cpu,
            min_cpu=least,
            min_cpu_node=samples[at].node,
            min_cpu_task=at,
        )
    return stats


def summary_stats(step: Mapping[str, Any]) -> TaskStats:
    """A step's figures from the controller's summary alone: all of them for a step of one
    task, else only its highest peak."""
    peak = step.get("max_rss_bytes")
    nodes = [str(node) for node in step.get("nodes") or ()]
    if int(step.get("tasks") or 0) == 1:
        return task_stats([Sample(nodes[0] if nodes else "", step.get("cpu_seconds"), peak)])
    return TaskStats(max_rss=None if peak is None else int(peak))


def samples_of(tasks: Iterable[Mapping[str, Any]]) -> list[Sample]:
    """Task views (the API's task or efficiency views, as JSON) as samples."""
    return [
        Sample(str(t.get("node") or ""), t.get("cpu_seconds"), t.get("max_rss_bytes"))
        for t in tasks
    ]


def step_samples(job: Mapping[str, Any]) -> dict[str, list[Sample]]:
    """Each step's tasks of the job's latest run, by step name, from its task views (none
    when the view has no tasks): grouped as the controller's summaries group them."""
    tasks = [ss.task_of(task) for task in job.get("tasks") or ()]
    run = ss.run_tasks(tasks, job.get("state") == "Pending", job.get("start_time"))
    out: dict[str, list[Sample]] = {}
    own = [t for t in run if t.group != ss.REMOTE_GROUP and t.step_id is None]
    if own and (job.get("allocation") or job.get("batch")):
        out[ss.EXTERN if job.get("allocation") else ss.BATCH] = _samples(own[:1])
    for task in run:
        if task.step_id is not None:
            out.setdefault(str(int(task.step_id)), []).extend(_samples([task]))
    return out


def _samples(tasks: Iterable[ss.StepTask]) -> list[Sample]:
    return [Sample(str(t.node or ""), t.cpu_seconds, t.max_rss_bytes) for t in tasks]


def has_steps(job: Mapping[str, Any]) -> bool:
    """Whether ``job`` has step rows (a batch script's, an allocation's or srun's steps)."""
    if job.get("batch") or job.get("allocation") or job.get("steps"):
        return True
    return any(task.get("step_id") is not None for task in job.get("tasks") or ())


def row_stats(job: Mapping[str, Any], usage: Mapping[str, Any]) -> TaskStats:
    """The per-task figures of a row: a step's (its usage's ``stats``), or a job's own from
    its efficiency view's tasks when it has no step rows (else none: its steps show them)."""
    if job.get("step") is not None:
        found = usage.get("stats")
        return found if isinstance(found, TaskStats) else TaskStats()
    if has_steps(job):
        return TaskStats()
    tasks = usage.get("tasks")
    if tasks is None:  # (an efficiency view without its tasks: one task's peak, if one)
        peak = usage.get("max_rss_bytes")
        if peak is None or int(usage.get("tasks_count") or 0) != 1:
            return TaskStats()
        return TaskStats(max_rss=int(peak))
    return task_stats(samples_of(t for t in tasks if t.get("group") != ss.REMOTE_GROUP))
