"""``squeue --start`` called by Slurm's name: the waiting jobs' expected starts in Slurm
22.05's lines, which scripts parse (``fusesched jobs --start`` keeps its table,
:mod:`fusesched.cli.starts`).

Slurm's default layout is ``%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R``: START_TIME the
expected start (``2026-12-07T19:10:00``, ``N/A`` when none is expected within the horizon),
SCHEDNODES the nodes it would start on (``(null)`` when not known). ``-o``/``-O`` take
squeue's fields with ``%S`` the expected start and ``%Y`` (``SchedNodes``) those nodes.

The expected starts come from ``GET /v1/starts`` (soonest first); each job's name, reason
and node count from ``GET /v1/jobs`` (asked for by id, :data:`IDS_PER_ASK` at a time).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from fusesched.cli import squeue_format as sq
from fusesched.cli.live import _call

Job = dict[str, Any]

#: squeue's ``--start`` layout when no ``-o``/``-O`` is given.
START_FORMAT: Final = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
#: Job ids asked for in one ``GET /v1/jobs`` (the API takes at most 100 values a filter).
IDS_PER_ASK: Final = 100


#: ``-o`` letters and ``-O`` names with ``--start``: squeue's (``%Y``, ``SchedNodes``, among
#: them: :mod:`fusesched.cli.squeue_fields`).
FIELDS: Final = sq.FIELDS
LONG_FIELDS: Final = sq.LONG_FIELDS


def parse(fmt: str | None, long_fmt: str | None) -> list[sq.Piece]:
    """The pieces of ``-o``/``-O`` (default: :data:`START_FORMAT`); a
    :class:`~fusesched.cli.squeue_format.FormatError` for a bad one."""
    if long_fmt is not None:
        return sq.parse_long_format(long_fmt, LONG_FIELDS, FIELDS)
    return sq.parse_format(START_FORMAT if fmt is None else fmt, FIELDS)


def rows(starts: Iterable[Job], views: dict[str, Job]) -> list[Job]:
    """Each expected start (``GET /v1/starts``' ``jobs``) as a job view for the fields: its
    view (when the controller answered one; else what the start says), its start time the
    expected one and ``sched_nodes`` where it would start."""
    from fusesched.cli.slurm_reasons import job_reason

    out = []
    for start in starts:
        job = views.get(start["id"]) or {
            "id": start["id"],
            "user": start.get("user"),
            "queue": start.get("queue"),
            "tenant": start.get("tenant"),
            "state": "Pending",
            "phase": start.get("phase"),
        }
        job = job | {"start_time": start.get("expected_start"), "sched_nodes": start["nodes"]}
        out.append(job | {"reason": job_reason(job)})
    return out


def views_of(client: Any, ids: Sequence[str]) -> dict[str, Job]:
    """The job views of ``ids`` by id (jobs that ended or went meanwhile are left out)."""
    found: dict[str, Job] = {}
    for at in range(0, len(ids), IDS_PER_ASK):
        chunk = list(ids[at : at + IDS_PER_ASK])
        for job in _call(client.jobs, ids=chunk, limit=len(chunk)):
            found[str(job["id"])] = job
    return found


def start_rows(client: Any, answer: dict[str, Any]) -> list[Job]:
    """The rows of ``answer`` (``GET /v1/starts``), soonest first, for squeue's fields."""
    starts = answer["jobs"]
    return rows(starts, views_of(client, [s["id"] for s in starts]))
