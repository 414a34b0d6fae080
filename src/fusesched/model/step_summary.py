"""A job's steps summarised from its tasks: what ``fusesched sacct`` prints a line of for each
step of the job's latest run (``ID.batch`` or ``ID.extern``, then ``ID.0``, ``ID.1``…).

The controller summarises them (``GET /v1/jobs?steps=true``) so that a listing grows with
a job's steps, not its tasks: a job of 10,000 ``srun`` tasks, or an MPI step of 4,096
ranks, is one line a step, not a row a task. ``fusesched sacct`` summarises the tasks of an
older controller's ``detail=true`` the same way. Pure: tasks in, summaries out.

* the latest run: the tasks that started at or after the latest start of the job's own
  tasks (its start when it has none); a job waiting again (requeued) has no steps.
* ``batch``: the job's own task of that run when a batch script (or mpirun) started it;
  ``extern``, instead, a ``salloc`` job's own task (which holds the allocation); a job
  whose own tasks run the command has neither.
* ``N``: the tasks of job step N (their ``step_id``), an MPI step's daemons included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from fusesched.model.phases import OOM_REASON

BATCH: Final = "batch"
EXTERN: Final = "extern"
#: What a remote task's group is (``<job>.remote.<n>``: a step's task or a helper).
REMOTE_GROUP: Final = "remote"


@dataclass(frozen=True)
class StepTask:
    """What a step's summary reads of one task (a stored row's or an API view's fields)."""

    group: str | None = None
    step_id: int | None = None
    node: str | None = None
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None
    step_tasks: int | None = None
    step_name: str | None = None
    cpu_seconds: float | None = None
    max_rss_bytes: int | None = None
    reason: str | None = None  # why it ended (the agent's: the OOM killer's, …)


_FIELDS: Final = tuple(f.name for f in fields(StepTask))


def task_of(source: object) -> StepTask:
    """The fields a summary reads of a task: a mapping's keys (an API view as JSON) or an
    object's attributes (a stored row); a missing one is None."""
    if isinstance(source, Mapping):
        return StepTask(*(source.get(name) for name in _FIELDS))
    return StepTask(*(getattr(source, name, None) for name in _FIELDS))


@dataclass(frozen=True)
class StepSummary:
    """One step of a job's latest run, from its tasks."""

    step: str  # "batch", "extern", or its number ("0", "1", …)
    name: str  # sacct's JobName: "batch", "extern", else srun -J's (or its command's), or ""
    tasks: int  # its tasks stored (an MPI step's mpirun and daemons included)
    ntasks: int  # its tasks in all (srun -n, an MPI step's ranks; unknown: ``tasks``)
    nodes: tuple[str, ...]  # where they ran, in order of first use
    start_time: float | None  # the earliest start
    end_time: float | None  # the latest end; None while one of them runs
    running: int  # how many have not ended
    exit_code: (
        int | None
    )  # the worst: highest status, else highest signal (negative); None: none ended
    signals: tuple[int, ...]  # the signals that ended some of them, ascending
    lost: bool  # one ended with no exit status (none, or -1: its node or agent lost it)
    cpu_seconds: float | None  # their CPU time; None: none sampled
    max_rss_bytes: int | None  # the highest peak of one of them; None: none sampled
    oom: bool = False  # the kernel's OOM killer killed in one of them (Slurm's OUT_OF_MEMORY)


def job_steps(
    tasks: Iterable[StepTask],
    *,
    waiting: bool,
    start_time: float | None,
    batch: bool,
    allocation: bool,
) -> list[StepSummary]:
    """The steps of a job's latest run in sacct's order (``batch`` or ``extern``, then
    ``0``, ``1``…); ``waiting``: the job waits (again); ``start_time``: its start;
    ``batch``/``allocation``: a batch script's or ``salloc``'s job."""
    run = run_tasks(list(tasks), waiting, start_time)
    found: list[StepSummary] = []
    own = [t for t in run if _own(t)]
    if own and allocation:
        found.append(summarise(EXTERN, own[:1]))
    elif own and batch:
        found.append(summarise(BATCH, own[:1]))
    numbered: dict[int, list[StepTask]] = {}
    for task in run:
        if task.step_id is not None:
            numbered.setdefault(int(task.step_id), []).append(task)
    found.extend(summarise(str(n), numbered[n]) for n in sorted(numbered))
    return found


def run_tasks(tasks: Sequence[StepTask], waiting: bool, start_time: float | None) -> list[StepTask]:
    """The tasks of the job's latest run (none while it waits again, or never ran)."""
    if waiting:
        return []
    own = [t.start_time for t in tasks if _own(t) and t.start_time is not None]
    start = max(own, default=start_time)
    if start is None:
        return []
    return [t for t in tasks if t.start_time is not None and t.start_time >= start]


def summarise(step: str, tasks: Sequence[StepTask]) -> StepSummary:
    """Step ``step`` run by ``tasks`` (at least one)."""
    starts = [t.start_time for t in tasks if t.start_time is not None]
    ends = [t.end_time for t in tasks if t.end_time is not None]
    codes = [int(t.exit_code) for t in tasks if t.exit_code is not None]
    cpu = [float(t.cpu_seconds) for t in tasks if t.cpu_seconds is not None]
    rss = [int(t.max_rss_bytes) for t in tasks if t.max_rss_bytes is not None]
    sizes = [int(t.step_tasks) for t in tasks if t.step_tasks]
    named = next((str(t.step_name) for t in tasks if t.step_name), "")
    ended = [t for t in tasks if t.end_time is not None]
    return StepSummary(
        step=step,
        name=step if step in (BATCH, EXTERN) else named,
        tasks=len(tasks),
        ntasks=max(sizes, default=len(tasks)),
        nodes=tuple(dict.fromkeys(str(t.node) for t in tasks if t.node)),
        start_time=min(starts, default=None),
        end_time=max(ends) if ends and len(ends) == len(tasks) else None,
        running=len(tasks) - len(ended),
        exit_code=worst_exit(codes),
        signals=tuple(sorted({-c for c in codes if c < -1})),
        lost=any(t.exit_code is None or t.exit_code == -1 for t in ended),
        cpu_seconds=sum(cpu) if cpu else None,
        max_rss_bytes=max(rss, default=None),
        # (the agent's reason itself: a stop's reason may quote it, as a job's OOM failure's)
        oom=any(t.reason == OOM_REASON for t in tasks),
    )


def worst_exit(codes: Sequence[int]) -> int | None:
    """The worst of exit codes, as a job's (a signal negative): the highest exit status,
    else the highest signal, else 0 (None: none)."""
    if not codes:
        return None
    if max(codes) > 0:
        return max(codes)
    return min(codes) if min(codes) < -1 else 0


def summary_record(summary: StepSummary) -> dict[str, Any]:
    """``summary`` as the API's JSON has it (lists for its tuples)."""
    record = {name: getattr(summary, name) for name in _SUMMARY_FIELDS}
    record.update(nodes=list(summary.nodes), signals=list(summary.signals))
    return record


_SUMMARY_FIELDS: Final = tuple(f.name for f in fields(StepSummary))


def _own(task: StepTask) -> bool:
    """One of the job's own tasks (not a step's, nor a helper the job started)."""
    return task.group != REMOTE_GROUP and task.step_id is None
