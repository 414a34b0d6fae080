"""``squeue -s``/``--steps``: the steps of the running jobs, a line each, as Slurm 22.05's squeue
lists them: ``STEPID NAME PARTITION USER TIME NODELIST`` (``37.0``, ``37.batch``), sorted
by partition and step id unless ``-S`` says otherwise.

``-s 37.0,38.batch`` lists those steps only (``-s 37``, all of job 37's: Slurm refuses a job
id without its step); ``-j``, ``-u``/``--me``, ``-p``, ``-n`` (the steps' names) and
``-w`` narrow it as they do jobs. A step is listed while it runs: the steps come from the
running jobs' summaries (``GET /v1/jobs?steps=true``: the latest run's ``batch``,
``extern`` and ``srun`` steps), those not ended.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from fusesched.cli import squeue_format as sq
from fusesched.cli.live import _call
from fusesched.cli.squeue_fields import Field
from fusesched.cli.squeue_sort import KEYS, SortKey, parse_sort, sort_rows

if TYPE_CHECKING:
    from fusesched.cli.squeue_plan import Filters

Job = dict[str, Any]

#: squeue's step layout (``-s``, with or without ``-l``).
STEP_FORMAT: Final = "%.15i %.8j %.9P %.8u %.9M %N"
#: squeue's order of steps without ``-S``: by partition, then by step id.
STEP_SORT: Final = "P,i"
#: A step as ``-s`` names one: ``JOB[_INDEX][.STEP]`` (STEP a number, ``batch``, ``extern``).
_STEP_ID: Final = re.compile(
    r"(?P<job>[0-9]{1,18}(?:_[0-9]{1,9})?)(?:\.(?P<step>[0-9]{1,9}|batch|extern))?"
)


def _array_index(step: Job) -> str:
    """``%K`` of a step: its job's index in its array (``N/A``: no array's)."""
    return str(step["job_id"]).rpartition("_")[2] if step.get("array_parent") else "N/A"


#: ``-o`` letters a step has (Slurm refuses a job's letters for steps, as here).
STEP_FIELDS: Final[dict[str, Field]] = {
    "i": Field("STEPID", lambda s: str(s["id"])),
    "j": sq.FIELDS["j"],
    "P": sq.FIELDS["P"],
    "u": sq.FIELDS["u"],
    "U": sq.FIELDS["U"],
    "M": sq.FIELDS["M"],
    "l": sq.FIELDS["l"],
    "S": sq.FIELDS["S"],
    "N": sq.FIELDS["N"],
    "A": Field("TASKS", lambda s: str(s.get("ntasks") or 0)),
    "F": Field("ARRAY_JOB_ID", lambda s: str(s.get("array_parent") or s["job_id"])),
    "K": Field("ARRAY_TASK_ID", _array_index),
}
#: ``-O`` names a step has, as those letters.
STEP_LONG_FIELDS: Final[dict[str, str]] = {
    "stepid": "i",
    "jobid": "i",
    "stepname": "j",
    "name": "j",
    "partition": "P",
    "username": "u",
    "userid": "U",
    "timeused": "M",
    "timelimit": "l",
    "starttime": "S",
    "nodes": "N",
    "nodelist": "N",
    "numtasks": "A",
    "arrayjobid": "F",
    "arraytaskid": "K",
}


@dataclass(frozen=True)
class StepFilter:
    """Which steps ``-s`` asks for: whole jobs' (``jobs``) and single steps (``steps``,
    ``37.0``); both empty: every running step."""

    jobs: frozenset[str] = frozenset()
    steps: frozenset[str] = frozenset()

    def job_ids(self) -> list[str]:
        """The jobs whose steps are asked for (``GET /v1/jobs?id=…``), in order."""
        return sorted({*self.jobs, *(s.partition(".")[0] for s in self.steps)})

    def keep(self, step: Job) -> bool:
        if not (self.jobs or self.steps):
            return True
        return step["job_id"] in self.jobs or step["id"] in self.steps


def parse_steps(given: str) -> StepFilter:
    """``-s``'s value: a comma list of steps (``37.0``, ``12_3.batch``) or jobs (``37``);
    empty: all. A ``ValueError`` for anything else."""
    jobs: set[str] = set()
    steps: set[str] = set()
    for raw in given.split(",") if given.strip() else ():
        item = raw.strip()
        found = _STEP_ID.fullmatch(item)
        if found is None:
            raise ValueError(
                f"bad job step {item!r} in --steps: JOB.STEP (37.0, 37.batch, 12_3.0) or a job "
                "id (all its steps)"
            )
        (steps if found["step"] else jobs).add(item)
    return StepFilter(frozenset(jobs), frozenset(steps))


def step_rows(jobs: Iterable[Job], names: Sequence[str] = ()) -> list[Job]:
    """Each running step of ``jobs`` (views with ``steps``) as a row for the fields: its id
    ``JOB.STEP``, name, the job's partition and user, its start, nodes and tasks; ``names``:
    only steps of those names."""
    rows = []
    for job in jobs:
        for step in job.get("steps") or ():
            if step.get("end_time") is not None or (names and step.get("name") not in names):
                continue
            rows.append(
                {
                    "id": f"{job['id']}.{step['step']}",
                    "job_id": str(job["id"]),
                    "array_parent": job.get("array_parent"),
                    "name": step.get("name") or "",
                    "queue": job.get("queue"),
                    "user": job.get("user"),
                    "start_time": step.get("start_time"),
                    "nodes": step.get("nodes") or [],
                    "ntasks": step.get("ntasks"),
                    "time_limit_s": None,  # (a step has none of its own: UNLIMITED, as Slurm)
                }
            )
    return rows


def parse_format(fmt: str | None, long_fmt: str | None) -> list[sq.Piece]:
    """The pieces of a step listing's ``-o``/``-O`` (default: :data:`STEP_FORMAT`)."""
    if long_fmt is not None:
        return sq.parse_long_format(long_fmt, STEP_LONG_FIELDS, STEP_FIELDS, "StepID,Name")
    return sq.parse_format(STEP_FORMAT if fmt is None else fmt, STEP_FIELDS)


#: How a step's letters sort where not as their text: ``%A`` by its count of tasks.
STEP_KEYS: Final = {**KEYS, "A": lambda step: int(step.get("ntasks") or 0)}


def steps_of(
    client: Any, f: Filters, chosen: StepFilter, nodes: frozenset[str], limit: int
) -> tuple[list[Job], bool]:
    """The running steps that ``f`` (``-j``, ``-u``, ``-p``, ``-n`` the steps' names),
    ``chosen`` (``-s``) and ``nodes`` (``-w``) ask for, and whether ``limit`` running jobs
    answered (there may be more)."""
    ids = sorted({*f.ids, *chosen.job_ids()})
    views = _call(
        client.jobs,
        f.users or None,
        ("Running",),
        f.queues or None,
        limit,
        f.array,
        ids=ids,
        me=f.me,
        steps=True,
    )
    found = [
        row
        for row in step_rows(views, f.names)
        if chosen.keep(row)
        and (not f.ids or row["job_id"] in f.ids or row.get("array_parent") in f.ids)
        and (not nodes or nodes.intersection(row["nodes"]))
    ]
    return found, len(views) >= limit


def ordered(rows: list[Job], order: list[SortKey] | None) -> list[Job]:
    """``rows`` in ``-S``'s order; without it, squeue's for steps (:data:`STEP_SORT`)."""
    keys = order if order is not None else parse_sort(STEP_SORT, STEP_FIELDS)
    return sort_rows(rows, keys, STEP_FIELDS, STEP_KEYS)
