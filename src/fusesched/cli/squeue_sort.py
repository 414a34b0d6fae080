"""squeue's ``-S/--sort``: the order of its lines, in Slurm's notation, ``-S P,-p`` (by
partition, then by priority, highest first), ``-S -t,i``, ``-S +V``.

Each item is a format letter (``-o``'s: :mod:`fusesched.cli.squeue_fields`, or a step
listing's), ``-`` before it for descending, ``+`` (or nothing) for ascending; ``cluster`` is
taken and orders nothing (fusesched is one cluster). Ids, counts, times and priorities sort
as numbers (``9`` before ``10``; ``N/A`` times last), states in Slurm's order (pending,
running, …), anything else as the text printed. Items after the first break ties, and ties
left keep the listing's order.

Without ``-S``, squeue's own orders (:func:`default_order`): jobs by :data:`JOB_SORT`
(partition, state, priority highest first), ``--start`` by :data:`START_SORT` (the expected
start, soonest first), ties as Slurm's (:func:`slurm_tie`: held jobs after the others); steps
by their own (:mod:`fusesched.cli.squeue_steps`). Pure.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

from fusesched.cli.squeue_fields import Field, priority
from fusesched.cli.squeue_states import slurm_state

Job = dict[str, Any]


class SortKey(NamedTuple):
    """One item of ``-S``: a format letter and its direction."""

    letter: str
    descending: bool = False


#: Slurm's job states in the order of their codes (as ``-S t`` orders them); a completing
#: job between the running and the ended ones.
STATE_ORDER: Final = {
    name: n
    for n, name in enumerate(
        (
            "PENDING",
            "RUNNING",
            "COMPLETING",
            "SUSPENDED",
            "COMPLETED",
            "CANCELLED",
            "FAILED",
            "TIMEOUT",
            "NODE_FAIL",
            "PREEMPTED",
            "BOOT_FAIL",
            "DEADLINE",
            "OUT_OF_MEMORY",
        )
    )
}
#: Where a step that is no numbered ``srun`` step sorts: after them, as Slurm's ids.
STEP_ORDER: Final = {"batch": 2**32 - 5, "extern": 2**32 - 4}


#: squeue's order of jobs without ``-S``: by partition, by state, by priority highest first.
JOB_SORT: Final = "P,t,-p"
#: ``squeue --start``'s order without ``-S``: the expected start, soonest (``N/A`` last).
START_SORT: Final = "S"


#: The last key of :data:`JOB_SORT`'s order (no ``-S`` letter): Slurm's priority where
#: fusesched's own ties (:func:`slurm_tie`).
JOB_TIE: Final = "_tie"


def default_order(text: str, fields: Mapping[str, Field]) -> list[SortKey]:
    """The keys of one of squeue's own orders (:data:`JOB_SORT`, :data:`START_SORT`), ties
    broken as Slurm's: jobs by :func:`slurm_tie`, expected starts oldest first (by id)."""
    return [*parse_sort(text, fields), SortKey(JOB_TIE if text == JOB_SORT else "i")]


def slurm_tie(job: Job) -> tuple[int, ...]:
    """Where a job stands among those of equal own priority (most of fusesched's: 0), as
    among Slurm 22.05's (checked against its squeue): a job that may start first, oldest
    first (Slurm's priorities fall with each job submitted); a held one after them (its
    priority 0), newest first (its controller's order), an array's members in index order."""
    number, member, _ = id_order(str(job["id"]))
    if job.get("phase") == "held":
        return 1, -number, member
    return 0, number, member


def parse_sort(text: str, fields: Mapping[str, Field]) -> list[SortKey]:
    """``-S``'s items as sort keys; a ``ValueError`` naming the known letters for an
    unknown one, or for an empty item."""
    keys: list[SortKey] = []
    for raw in text.split(","):
        item = raw.strip()
        sign = item[:1] if item[:1] in ("+", "-") else ""
        letter = item[len(sign) :].strip()
        if not letter:
            raise ValueError(f"an empty sort field in --sort {text!r}: give letters, such as P,-p")
        if letter.lower() == "cluster":
            continue  # (one cluster: nothing to order)
        if letter not in fields:
            raise ValueError(
                f"unknown sort field {letter!r} in --sort {text!r}; known: "
                + " ".join(fields)
                + " (and cluster), each with - before it for descending"
            )
        keys.append(SortKey(letter, sign == "-"))
    return keys


def id_order(text: str) -> tuple[int, int, int]:
    """``12`` < ``12_3`` < ``12_10`` < ``13``; a step's ``37.0`` < ``37.1`` < ``37.batch``;
    an array's waiting members shown as one row (``12_[4-9]``) before its other members."""
    job, _, step = text.partition(".")
    head, _, index = job.partition("_")
    number = int(head) if head.isdigit() else 0
    member = int(index) if index.isdigit() else -1
    if not step:
        return number, member, -1
    return number, member, int(step) if step.isdigit() else STEP_ORDER.get(step, 2**32)


def _time(key: str) -> Callable[[Job], float]:
    """A time of the view (``N/A``, not known: last)."""
    return lambda job: math.inf if job.get(key) is None else float(job[key])


def _used(job: Job) -> float:
    start, end = job.get("start_time"), job.get("end_time")
    if start is None:
        return 0.0
    return float((end if end is not None else time.time()) - start)


def _limit(job: Job) -> float:
    limit = job.get("time_limit_s")
    return math.inf if limit is None else float(limit)


def _end(job: Job) -> float:
    if job.get("end_time") is not None:
        return float(job["end_time"])
    start, limit = job.get("start_time"), job.get("time_limit_s")
    return math.inf if start is None or limit is None else float(start + limit)


def _nodes(job: Job) -> float:
    held = job.get("nodes") or []
    return float(len(held) if held else job.get("min_nodes") or 1)


def _number(key: str) -> Callable[[Job], float]:
    return lambda job: float(job.get(key) or 0)


#: Letters that do not sort as the text they print.
KEYS: Final[dict[str, Callable[[Job], Any]]] = {
    "i": lambda job: id_order(str(job["id"])),
    "A": lambda job: id_order(str(job["id"])),
    "F": lambda job: id_order(str(job.get("array_parent") or job["id"])),
    "t": lambda job: STATE_ORDER.get(slurm_state(job), len(STATE_ORDER)),
    "T": lambda job: STATE_ORDER.get(slurm_state(job), len(STATE_ORDER)),
    "p": priority,
    "Q": priority,
    "C": _number("cpus"),
    "c": _number("cpus_per_task"),
    "D": _nodes,
    "M": _used,
    "l": _limit,
    "L": lambda job: _limit(job) - _used(job),
    "S": _time("start_time"),
    "V": _time("submit_time"),
    "e": _end,
    JOB_TIE: slurm_tie,
}


def sort_rows(
    rows: Iterable[Job],
    keys: Iterable[SortKey],
    fields: Mapping[str, Field],
    special: Mapping[str, Callable[[Job], Any]] = KEYS,
) -> list[Job]:
    """``rows`` in the order of ``keys`` (the first the main one); ``special``: the letters
    that sort by a value of their own, the others by the text ``fields`` print."""
    out = list(rows)
    for key in reversed(list(keys)):
        pick = special.get(key.letter) or fields[key.letter].value
        out.sort(key=pick, reverse=key.descending)
    return out
