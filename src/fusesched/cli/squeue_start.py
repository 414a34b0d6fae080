"""``squeue --start`` called by Slurm's name: the waiting jobs' expected starts in Slurm
22.05's lines, which scripts parse (``fusesched jobs --start`` keeps its table,
:mod:`fusesched.cli.starts`).

Slurm's default layout is ``%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R``: START_TIME the
expected start (``2026-12-07T19:10:00``, ``N/A`` when none is expected within the horizon),
SCHEDNODES the nodes it would start on (``(null)`` when not known). ``-o``/``-O`` take
squeue's fields with ``%S`` the expected start and ``%Y`` (``SchedNodes``) those nodes.

As Slurm's, ``--start`` is ``-t PENDING -S S`` in that layout, and each may be changed: the
jobs are those ``GET /v1/jobs`` answers for the filters (``-j``, ``-n``, ``-u``, ``-p``,
``-t``…; each array member on its own row), a waiting one with its expected start from
``GET /v1/starts``; a held job (which that leaves out) ``N/A``, as Slurm's; a running or
ended job (``-t R``) its own start. Soonest first (``N/A`` last, ties oldest first) unless
``-S`` says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from fusesched.cli import squeue_format as sq
from fusesched.cli.live import _call

if TYPE_CHECKING:
    from fusesched.cli.squeue_plan import Plan

Job = dict[str, Any]

#: squeue's ``--start`` layout when no ``-o``/``-O`` is given.
START_FORMAT: Final = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"


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


def rows(views: Iterable[Job], starts: Iterable[Job]) -> list[Job]:
    """The job views as ``--start``'s rows: a waiting job's start time its expected one and
    ``sched_nodes`` where it would start (``starts``: ``GET /v1/starts``' ``jobs``); one not
    there (held, or submitted since the projection) ``N/A`` and ``(null)``, as Slurm's held
    jobs; another job's its own start. Each with Slurm's reason code."""
    from fusesched.cli.slurm_reasons import job_reason

    expected = {str(s.get("id")): s for s in starts if isinstance(s, dict)}
    out = []
    for job in views:
        if job.get("state") == "Pending":
            start = expected.get(str(job["id"])) or {}
            job = job | {
                "start_time": start.get("expected_start"),
                "sched_nodes": start.get("nodes") or [],
            }
        out.append(job | {"reason": job_reason(job)})
    return out


def start_rows(client: Any, p: Plan, views: list[Job]) -> list[Job]:
    """``squeue --start``'s rows of ``views`` (``GET /v1/jobs`` as ``p``'s filters ask): those
    in ``-t``'s states (pending without it) that the other filters keep, the waiting ones
    with their expected starts (``GET /v1/starts``, asked once), in ``p``'s order."""
    from fusesched.cli.squeue_sort import sort_rows

    f = p.filters
    if f.match is not None:
        views = [job for job in views if sq.matches(f.match, job)]
    views = [job for job in views if p.local.keep(job)]
    starts: list[Job] = []
    if any(job.get("state") == "Pending" for job in views):
        one_user = f.users[0] if len(f.users) == 1 and not f.me else None
        one_queue = f.queues[0] if len(f.queues) == 1 else None
        starts = _call(client.starts, one_user, one_queue)["jobs"]
    found = rows(views, starts)
    return sort_rows(found, p.order, FIELDS) if p.order else found
