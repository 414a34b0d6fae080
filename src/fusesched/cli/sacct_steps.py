"""A job's steps as ``fusesched sacct`` prints them under the job, as Slurm's sacct does:
``ID.batch`` (the batch script), ``ID.extern`` (what holds a ``salloc`` allocation) and
``ID.0``, ``ID.1``… (each ``srun`` inside the job), and what ``-j ID.N`` selects.

Pure functions of a job view with its tasks (``GET /v1/jobs?detail=true``). The steps are
those of the job's latest run (as sacct without ``--duplicates``): its tasks that started at
or after the latest start of the job's own tasks; a job waiting again (requeued) shows none.

* ``ID.batch``: the job's own task of that run, when a batch script (or mpirun) started the
  job (``batch``: sbatch's jobs). A job whose own tasks run the command (``fusesched run``,
  YAML jobs) has no ``.batch`` row, as Slurm shows none for an ``srun`` job: its row is them.
* ``ID.extern``, instead of ``ID.batch``: a ``salloc`` job's own task (``allocation``), which
  only holds the allocation (submit/salloc_holder.py) while salloc's command runs on the
  submit host. Slurm runs no batch step for ``salloc``; where it is configured to
  (``PrologFlags=Contain``) it shows an ``extern`` step that holds the allocation on each of
  its nodes (without, no row at all). Shown as that one: the job's nodes (one task on each)
  and all its CPUs, ``RUNNING``, then ``COMPLETED 0:0`` however the job ended (the holder's
  exit status is the command's, passed on to the job's row), or ``NODE_FAIL`` when a node
  of the allocation failed.
* ``ID.N``: the tasks of job step N (their ``step_id``), mpirun's daemons of an MPI step
  included (its nodes are theirs). Daemons of a batch script's own mpirun belong to no step
  and show in no row.
* a step is ``RUNNING`` while a task of it runs; ended, ``OUT_OF_MEMORY`` (killed, in a job
  ended so), ``FAILED`` (a task exited non-zero or by a signal other than SIGTERM, SIGKILL
  or SIGINT), ``CANCELLED`` (stopped: by those signals, by the controller, or in a job
  cancelled, timed out or preempted) or ``COMPLETED``; a task the job's end left running is
  ``CANCELLED`` (``NODE_FAIL`` when the job's node failed). Its exit code is the worst:
  the highest exit status, else the highest signal.
* its JobName: ``batch``, ``extern``, or the step's name (``srun -J``, else its command's
  base name, as Slurm's; empty for a step stored before names were).
* its Start/End: its tasks' earliest start and latest end; NodeList/NNodes: their nodes;
  TotalCPU: their CPU time; MaxRSS: the highest peak of one task; NTasks: the step's tasks
  (``step_tasks``: ``srun -n``, an MPI step's ranks; stored before: its tasks' count).
* AllocCPUS (and so CPUTime, AllocTRES): a numbered step's tasks × the job's CPUs per task
  (``cpus_per_task``), as Slurm's; the ``.batch`` and ``.extern`` steps' (and a step's whose
  job's task groups ask different CPUs) is the job's CPUs on its nodes, shared evenly among
  them (the ``.extern`` step's nodes: all the job's).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from fusesched.cli.sacct_format import ENDED_BY_CONTROLLER
from fusesched.cli.squeue_format import comma_list, job_ids

Job = dict[str, Any]
Task = Mapping[str, Any]
#: The step names ``-j ID.NAME`` takes besides numbers (``extern``: a ``salloc`` job's; of
#: any other job it matches none).
BATCH: Final = "batch"
EXTERN: Final = "extern"
#: What a remote task's group is (``<job>.remote.<n>``: a step's task or a helper).
REMOTE_GROUP: Final = "remote"
#: Signals that stop a task (cancelled), not a failure of its own.
_STOPPING: Final = frozenset({2, 9, 15})
_STEP: Final = re.compile(r"[0-9]{1,9}")

#: ``-j``'s selection: a job id (or array id) as given, with None for the whole job, or
#: the names of the steps asked for (``{"0", "batch"}``).
Picks = dict[str, set[str] | None]


def parse_job_steps(given: Iterable[str] | None) -> tuple[list[str], Picks]:
    """``-j 12,13.0,14_2.batch``: the job ids to ask for and what of each to show; a
    ``ValueError`` for a bad job id or step."""
    picks: Picks = {}
    for item in comma_list(given, "job id"):
        head, dot, step = item.partition(".")
        (job,) = job_ids([head or item])
        if not dot:
            picks[job] = None
            continue
        if step.isascii() and step.isdigit() and not _STEP.fullmatch(step):
            raise ValueError(f"bad job step {step!r} in {item!r}: a step number of 1 to 9 digits")
        if not (_STEP.fullmatch(step) or step in (BATCH, EXTERN)):
            raise ValueError(
                f"bad job step {step!r} in {item!r}: a step number ({head}.0), {head}.batch "
                f"or {head}.extern"
            )
        chosen = picks.setdefault(job, set())
        if chosen is not None:
            chosen.add(str(int(step)) if step.isdigit() else step)
    return list(picks), picks


def picked(picks: Picks, job: Job) -> set[str] | None:
    """What ``-j`` shows of ``job``: None for it and all its steps (also when ``-j`` was
    not given), else only those steps (an empty set: none)."""
    if not picks:
        return None
    keys = [key for key in (str(job["id"]), job.get("array_parent")) if key in picks]
    chosen: set[str] = set()
    for key in keys:
        names = picks[key]
        if names is None:
            return None
        chosen |= names
    return chosen


def run_tasks(job: Job) -> list[Task]:
    """The tasks of the job's latest run (none while it waits again, or never ran)."""
    tasks: list[Task] = list(job.get("tasks") or ())
    if job.get("state") == "Pending":
        return []
    own = [t["start_time"] for t in tasks if _own(t) and t.get("start_time") is not None]
    start = max(own, default=job.get("start_time"))
    if start is None:
        return []
    return [t for t in tasks if t.get("start_time") is not None and t["start_time"] >= start]


def steps(job: Job) -> list[tuple[str, list[Task]]]:
    """The job's steps of its latest run in sacct's order (``batch`` or ``extern``, then
    ``0``, ``1``…), each with its tasks."""
    run = run_tasks(job)
    found: list[tuple[str, list[Task]]] = []
    own = [t for t in run if _own(t)]
    if own and job.get("allocation"):
        found.append((EXTERN, own[:1]))
    elif own and job.get("batch"):
        found.append((BATCH, own[:1]))
    numbered: dict[int, list[Task]] = {}
    for task in run:
        if task.get("step_id") is not None:
            numbered.setdefault(int(task["step_id"]), []).append(task)
    found.extend((str(n), numbered[n]) for n in sorted(numbered))
    return found


def step_rows(job: Job, state: str, names: set[str] | None = None) -> list[tuple[Job, Job]]:
    """The job's step rows (each a job-like view and its usage, what :mod:`sacct_format`'s
    fields read), in order; ``state``: the job's sacct state; ``names``: only these steps."""
    return [
        step_view(job, name, tasks, state)
        for name, tasks in steps(job)
        if names is None or name in names
    ]


def step_view(job: Job, name: str, tasks: Sequence[Task], job_state: str) -> tuple[Job, Job]:
    """Step ``name`` of ``job`` run by ``tasks`` as a job-like view (``step``: its name;
    ``state``: its sacct state, ``phase`` empty) and its usage (``tasks_count``,
    ``cpu_seconds``, ``max_rss_bytes``)."""
    starts = [t["start_time"] for t in tasks if t.get("start_time") is not None]
    ends = [t["end_time"] for t in tasks if t.get("end_time") is not None]
    nodes = list(dict.fromkeys(str(t["node"]) for t in tasks if t.get("node")))
    start = min(starts, default=None)
    state, code = step_state(tasks, job_state), worst_exit(tasks)
    if name == EXTERN:  # (the allocation's: see the module's notes)
        nodes = [str(node) for node in job.get("nodes") or ()] or nodes
        if len(ends) == len(tasks) and state != "NODE_FAIL":
            state, code = "COMPLETED", 0
    view: Job = {
        "id": f"{job['id']}.{name}",
        "step": name,
        "name": name if name in (BATCH, EXTERN) else _step_name(tasks),
        "tenant": job.get("tenant"),
        "state": state,
        "phase": "",
        "exit_code": code,
        "reason": "",
        "submit_time": start,
        "start_time": start,
        "end_time": max(ends) if ends and len(ends) == len(tasks) else None,
        "nodes": nodes,
        "cpus": _share(job, len(nodes)),
    }
    ranks = max((int(t["step_tasks"]) for t in tasks if t.get("step_tasks")), default=len(tasks))
    if name == EXTERN:
        ranks = len(nodes) or ranks  # (one on each node of the allocation)
    if name not in (BATCH, EXTERN) and job.get("cpus_per_task") is not None:
        view["cpus"] = ranks * float(job["cpus_per_task"])
    cpu = [t["cpu_seconds"] for t in tasks if t.get("cpu_seconds") is not None]
    rss = [t["max_rss_bytes"] for t in tasks if t.get("max_rss_bytes") is not None]
    usage: Job = {
        "tasks_count": ranks,
        "cpu_seconds": sum(cpu) if cpu else None,
        "max_rss_bytes": max(rss, default=None),
    }
    return view, usage


def step_state(tasks: Iterable[Task], job_state: str) -> str:
    """A step's sacct state from its tasks' (see the module's notes); ``job_state``: its
    job's sacct state."""
    codes = [t.get("exit_code") for t in tasks]
    if any(t.get("end_time") is None for t in tasks):
        if job_state == "RUNNING":
            return "RUNNING"
        return "NODE_FAIL" if job_state == "NODE_FAIL" else "CANCELLED"
    signals = {-c for c in codes if c is not None and c < -1}
    if job_state == "OUT_OF_MEMORY" and 9 in signals:
        return "OUT_OF_MEMORY"
    stopped = job_state in ENDED_BY_CONTROLLER  # (its tasks stopped by whatever signal)
    if any(c is not None and c > 0 for c in codes) or (signals - _STOPPING and not stopped):
        return "FAILED"
    if signals or -1 in codes or None in codes:  # (None: it ended with no exit status)
        return "NODE_FAIL" if job_state == "NODE_FAIL" else "CANCELLED"
    return "COMPLETED"


def worst_exit(tasks: Iterable[Task]) -> int | None:
    """The worst of the tasks' exit codes, as a job's (a signal negative): the highest exit
    status, else the highest signal, else 0 (None: none ended yet)."""
    codes = [int(t["exit_code"]) for t in tasks if t.get("exit_code") is not None]
    if not codes:
        return None
    if max(codes) > 0:
        return max(codes)
    return min(codes) if min(codes) < -1 else 0


def _step_name(tasks: Iterable[Task]) -> str:
    """A numbered step's name: its tasks' (``srun -J``, else its command's; stored before
    names were: none)."""
    return next((str(t["step_name"]) for t in tasks if t.get("step_name")), "")


def _own(task: Task) -> bool:
    """One of the job's own tasks (not a step's, nor a helper the job started)."""
    return task.get("group") != REMOTE_GROUP and task.get("step_id") is None


def _share(job: Job, nodes: int) -> float | None:
    """The job's CPUs on ``nodes`` of its nodes, shared evenly (None: unknown)."""
    cpus, held = job.get("cpus"), len(job.get("nodes") or ())
    if cpus is None or not held:
        return None
    return float(cpus) * min(nodes, held) / held
