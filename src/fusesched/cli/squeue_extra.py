"""squeue's values that a job listing (``GET /v1/jobs``) does not hold, asked for only when
the format shows them: ``%S`` of a waiting job (its expected start, ``GET /v1/starts``) and
``%m`` (the memory it asks for a node, from its efficiency view, ``GET
/v1/jobs/{id}/efficiency``: one call a job shown, one an array). A controller that does not
answer leaves Slurm's value for "not known" (``N/A``, ``0``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Final

from fusesched.cli import squeue_format as sq

Job = dict[str, Any]
#: Slurm's units for memory, megabytes first.
_UNITS: Final = ("M", "G", "T", "P")


def _shows(pieces: Sequence[sq.Piece], letter: str) -> bool:
    return any(piece.field is sq.FIELDS[letter] for piece in pieces)


def expected_starts(client: Any, pieces: Sequence[sq.Piece], found: list[Job]) -> list[Job]:
    """squeue's ``%S`` of a waiting job is when it is expected to start (Slurm's, from its
    backfill pass; ``N/A`` when none is known): asked (``GET /v1/starts``) only when the
    format shows ``%S`` and a job waits; a controller that does not answer leaves ``N/A``."""
    from fusesched.sdk import ControllerError

    if not _shows(pieces, "S") or not any(job.get("state") == "Pending" for job in found):
        return found
    try:
        starts = client.starts()["jobs"]
    except (ControllerError, KeyError, TypeError):
        return found
    when = {str(s.get("id")): s.get("expected_start") for s in starts if isinstance(s, dict)}
    return [
        job | {"start_time": when[job["id"]]}
        if job.get("state") == "Pending" and job.get("id") in when
        else job
        for job in found
    ]


def memory_text(megabytes: int, convert: bool = True) -> str:
    """``%m`` as squeue writes it: ``2048`` megabytes ``2G`` (a larger unit only where it
    is exact: ``1500M`` stays), or ``2048M`` with ``--noconvert``."""
    unit = 0
    while convert and megabytes >= 1024 and megabytes % 1024 == 0 and unit < len(_UNITS) - 1:
        megabytes //= 1024
        unit += 1
    return f"{megabytes}{_UNITS[unit]}"


def _asked_of(job: Job) -> str:
    """Whose efficiency view says what ``job``'s row asks for: its own; an array's member's
    (and a combined row's, ``1_[0-999%2]``) its array's first member's, every member asking
    what the array asks."""
    parent, tasks = job.get("array_parent"), job.get("array_tasks")
    if parent and tasks:
        first = re.match(r"[0-9]+", str(tasks))
        return f"{parent}_{first.group()}" if first else str(job["id"])
    return str(job["id"])


def asked_memory(
    client: Any, pieces: Sequence[sq.Piece], found: list[Job], convert: bool = True
) -> list[Job]:
    """The jobs with ``min_memory``, ``%m``'s text (what each asks for a node), when the
    format shows ``%m``: one efficiency view asked for an array (a combined row's too) and
    one a job of no array. A job whose view is not there (gone) keeps ``0``, and a
    controller that refuses stops the asking (the jobs not asked keep ``0``)."""
    from fusesched.sdk import ControllerError

    if not _shows(pieces, "m"):
        return found
    asked: dict[str, int | None] = {}
    out: list[Job] = []
    for at, job in enumerate(found):
        key = str(job.get("array_parent") or job["id"])  # (an array's members ask alike)
        if key not in asked:
            try:
                asked[key] = client.efficiency(_asked_of(job)).get("memory_bytes")
            except ControllerError as exc:
                if exc.status != 404:
                    return out + found[at:]
                asked[key] = None
        nodes = len(job.get("nodes") or []) or int(job.get("min_nodes") or 1)
        amount = asked[key]
        if not amount:
            out.append(job)
            continue
        megabytes = math.ceil(amount / 2**20 / max(nodes, 1))
        out.append(job | {"min_memory": memory_text(megabytes, convert)})
    return out
