"""``fusesched jobs`` without ``-r``: each array's members that wait and never started, and
wait for the same reason, as ONE row (``1009_[2-999%2]``), as Slurm's squeue shows them.

A controller combines them itself (``GET /v1/jobs?combine_arrays=true``: its rows carry
``array_tasks``); one older than that answers a row a member, which :func:`combine` turns
into the same rows (without the array's throttle, which those answers do not hold).
Pure functions of the job views.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from fusesched.model.array_tasks import capped, combined_id, index_ranges

Job = dict[str, Any]


def combined_answer(found: Sequence[Job]) -> bool:
    """Whether ``found`` came from a controller that combines (or holds no row to tell)."""
    return not found or "array_tasks" in found[0]


def waiting_member(job: Job) -> bool:
    """An array's member that waits and never started (one of a combined row)."""
    return bool(
        job.get("array_parent")
        and job.get("state") == "Pending"
        and job.get("start_time") is None
        and not job.get("completing")
        and not job.get("array_tasks")
    )


def combine(found: Sequence[Job]) -> list[Job]:
    """``found`` (newest first, a row a member) with each array's waiting members that wait
    for one reason as one row at the newest one's place: its view, with the id
    ``1009_[2-9]``, ``array_tasks`` and ``array_count``. One such member alone keeps its
    row (as squeue shows the last of an array's waiting members)."""
    groups: dict[tuple[str, str], list[Job]] = {}
    order: list[Job | tuple[str, str]] = []
    for job in found:
        if not waiting_member(job):
            order.append(job)
            continue
        key = (str(job["array_parent"]), str(job.get("reason") or ""))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(job)
    rows: list[Job] = []
    for item in order:
        if isinstance(item, dict):
            rows.append(item)
        elif len(groups[item]) == 1:
            rows.append(groups[item][0])
        else:
            rows.append(_row(item[0], groups[item]))
    return rows


def _row(parent: str, members: list[Job]) -> Job:
    indices = sorted(int(str(m["id"]).rpartition("_")[2]) for m in members)
    step = math.gcd(*(b - a for a, b in itertools.pairwise(indices))) or 1
    ranges = capped(index_ranges(indices, step))
    return {
        **members[0],
        "id": combined_id(parent, ranges, None),
        "array_tasks": ranges,
        "array_count": len(members),
    }
