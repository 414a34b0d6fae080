"""A job's steps as ``fusesched sacct`` prints them under the job, as Slurm's sacct does:
``ID.batch`` (the batch script), ``ID.extern`` (what holds a ``salloc`` allocation) and
``ID.0``, ``ID.1``… (each ``srun`` inside the job), and what ``-j ID.N`` selects.

Pure functions of a job view with its steps summarised by the controller (``GET
/v1/jobs?steps=true``: :mod:`fusesched.model.step_summary`), or with its tasks (``detail=true``,
an older controller's: summarised here the same way). The steps are those of the job's latest
run (as sacct without ``--duplicates``): its tasks that started at or after the latest start
of the job's own tasks; a job waiting again (requeued) shows none.

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
* a step is ``RUNNING`` while a task of it runs; ended, ``OUT_OF_MEMORY`` (the kernel's OOM
  killer killed in one of its tasks, as Slurm's step whose cgroup had an oom-kill event,
  whatever its exit status: a script whose child was killed exits 137; or, of an older
  controller's summary, killed in a job ended so), ``FAILED`` (a task exited non-zero or
  by a signal other than SIGTERM, SIGKILL or SIGINT), ``CANCELLED`` (stopped: by those
  signals, by the controller, or in a job cancelled, timed out or preempted) or
  ``COMPLETED``; a task the job's end left running is
  ``CANCELLED`` (``NODE_FAIL`` when the job's node failed). Its exit code is the worst:
  the highest exit status, else the highest signal.
* its JobName: ``batch``, ``extern``, or the step's name (``srun -J``, else its command's
  base name, as Slurm's; empty for a step stored before names were).
* its Start/End: its tasks' earliest start and latest end; NodeList/NNodes: their nodes;
  TotalCPU: their CPU time; MaxRSS: the highest peak of one task; NTasks: the step's tasks
  (``step_tasks``: ``srun -n``, an MPI step's ranks; stored before: its tasks' count);
  AveRSS, AveCPU, MinCPU and the node and task of the peak and of the least CPU time: of its
  tasks (:mod:`fusesched.cli.sacct_usage`; of a step of several tasks only with the job's
  tasks, ``detail=true``).
* AllocCPUS (and so CPUTime, AllocTRES): a numbered step's tasks × the job's CPUs per task
  (``cpus_per_task``), as Slurm's; the ``.batch`` and ``.extern`` steps' (and a step's whose
  job's task groups ask different CPUs) is the job's CPUs on its nodes, shared evenly among
  them (the ``.extern`` step's nodes: all the job's).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from fusesched.cli import sacct_usage as su
from fusesched.cli.id_lists import comma_list, job_ids
from fusesched.cli.sacct_format import ENDED_BY_CONTROLLER
from fusesched.model import step_summary as ss

Job = dict[str, Any]
#: A step's summary as the API's JSON has it (``JobView.steps``' items).
Step = Mapping[str, Any]
#: The step names ``-j ID.NAME`` takes besides numbers (``extern``: a ``salloc`` job's; of
#: any other job it matches none).
BATCH: Final = ss.BATCH
EXTERN: Final = ss.EXTERN
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


def steps(job: Job) -> list[Step]:
    """The job's steps of its latest run in sacct's order (``batch`` or ``extern``, then
    ``0``, ``1``…), each summarised: the controller's summaries, else its tasks'."""
    given = job.get("steps")
    if given is not None:
        return list(given)
    return [ss.summary_record(step) for step in summarise_job(job)]


def summarise_job(job: Job) -> list[ss.StepSummary]:
    """The steps of a job view with its tasks (``detail=true``), summarised."""
    return ss.job_steps(
        (ss.task_of(task) for task in job.get("tasks") or ()),
        waiting=job.get("state") == "Pending",
        start_time=job.get("start_time"),
        batch=bool(job.get("batch")),
        allocation=bool(job.get("allocation")),
    )


def summarise(name: str, tasks: Iterable[Mapping[str, Any]]) -> Step:
    """Step ``name`` run by ``tasks`` (API task views), summarised as the controller does."""
    return ss.summary_record(ss.summarise(name, [ss.task_of(task) for task in tasks]))


def step_rows(job: Job, state: str, names: set[str] | None = None) -> list[tuple[Job, Job]]:
    """The job's step rows (each a job-like view and its usage, what :mod:`sacct_format`'s
    fields read), in order; ``state``: the job's sacct state; ``names``: only these steps."""
    samples = su.step_samples(job)
    return [
        step_view(job, step, state, samples.get(str(step["step"])))
        for step in steps(job)
        if names is None or step["step"] in names
    ]


def step_view(
    job: Job, step: Step, job_state: str, samples: Sequence[su.Sample] | None = None
) -> tuple[Job, Job]:
    """``step`` of ``job`` (its summary) as a job-like view (``step``: its name; ``state``:
    its sacct state, ``phase`` empty) and its usage (``tasks_count``, ``cpu_seconds``,
    ``max_rss_bytes``, ``stats``: its per-task figures, from ``samples``, its tasks' figures,
    when known, else from its summary)."""
    name = str(step["step"])
    nodes = [str(node) for node in step.get("nodes") or ()]
    state, code = step_state(step, job_state), step.get("exit_code")
    if name == EXTERN:  # (the allocation's: see the module's notes)
        nodes = [str(node) for node in job.get("nodes") or ()] or nodes
        if not step.get("running") and state != "NODE_FAIL":
            state, code = "COMPLETED", 0
    view: Job = {
        "id": f"{job['id']}.{name}",
        "step": name,
        "name": str(step.get("name") or ""),
        "tenant": job.get("tenant"),
        "seq": job.get("seq"),  # (sacct's DBIndex: the job's)
        "state": state,
        "phase": "",
        "exit_code": code,
        "reason": "",
        "submit_time": step.get("start_time"),
        "start_time": step.get("start_time"),
        "end_time": step.get("end_time"),
        "nodes": nodes,
        "cpus": _share(job, len(nodes)),
    }
    ranks = int(step.get("ntasks") or 0)
    if name == EXTERN:
        ranks = len(nodes) or ranks  # (one on each node of the allocation)
    if name not in (BATCH, EXTERN) and job.get("cpus_per_task") is not None:
        view["cpus"] = ranks * float(job["cpus_per_task"])
    usage: Job = {
        "tasks_count": ranks,
        "cpu_seconds": step.get("cpu_seconds"),
        "max_rss_bytes": step.get("max_rss_bytes"),
        "stats": su.task_stats(samples) if samples else su.summary_stats(step),
    }
    return view, usage


def step_state(step: Step, job_state: str) -> str:
    """A step's sacct state from its summary (see the module's notes); ``job_state``: its
    job's sacct state."""
    if step.get("running"):
        if job_state == "RUNNING":
            return "RUNNING"
        return "NODE_FAIL" if job_state == "NODE_FAIL" else "CANCELLED"
    signals = {int(s) for s in step.get("signals") or ()}
    if step.get("oom") or (job_state == "OUT_OF_MEMORY" and 9 in signals):
        return "OUT_OF_MEMORY"
    stopped = job_state in ENDED_BY_CONTROLLER  # (its tasks stopped by whatever signal)
    code = step.get("exit_code")
    if (code is not None and code > 0) or (signals - _STOPPING and not stopped):
        return "FAILED"
    if signals or step.get("lost"):  # (lost: it ended with no exit status)
        return "NODE_FAIL" if job_state == "NODE_FAIL" else "CANCELLED"
    return "COMPLETED"


def _share(job: Job, nodes: int) -> float | None:
    """The job's CPUs on ``nodes`` of its nodes, shared evenly (None: unknown)."""
    cpus, held = job.get("cpus"), len(job.get("nodes") or ())
    if cpus is None or not held:
        return None
    return float(cpus) * min(nodes, held) / held
