"""An array's members in Slurm's short form: ``2-999%2`` (indices 2 to 999, at most 2
running at a time), ``1,4-6``, ``0-998:2`` (every second index): what squeue prints for
the members of an array that wait as one row (``1009_[2-999%2]``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

#: The longest index text a combined row shows, as Slurm's squeue (``SLURM_BITSTR_LEN``,
#: 64 by default): an array whose waiting members are scattered would else make an id of
#: hundreds of kilobytes (50,000 runs for every second one of 100,000).
MAX_TEXT: Final = 64


def index_ranges(indices: Iterable[int], step: int = 1) -> str:
    """``indices`` (any order, repeats ignored) as comma-separated runs: ``a-b`` for a run
    of consecutive ones, ``a-b:step`` for one of three or more ``step`` apart (the array's
    step, above 1), a lone index as itself."""
    ordered = sorted(set(indices))
    if step < 1:
        raise ValueError(f"step must be at least 1, got {step}")
    parts: list[str] = []
    at = 0
    while at < len(ordered):
        end = at
        while end + 1 < len(ordered) and ordered[end + 1] - ordered[end] == step:
            end += 1
        if step > 1 and end - at == 1:  # (two a step apart: as two indices)
            end = at
        parts.append(run_text(ordered[at], ordered[end], step))
        at = end + 1
    return ",".join(parts)


def capped(ranges: str, limit: int = MAX_TEXT) -> str:
    """``ranges`` (:func:`index_ranges`'s text) cut to at most ``limit`` characters after a
    whole run, ending ``,...`` where cut (as squeue cuts a long one): ``1,3,5,...``."""
    if len(ranges) <= limit:
        return ranges
    kept = ranges[: max(limit - 3, 0)].rpartition(",")[0]
    return f"{kept or ranges.partition(',')[0]},..."


def run_text(first: int, last: int, step: int = 1) -> str:
    """The indices ``first`` to ``last``, ``step`` apart, as :func:`index_ranges` writes
    them: ``7``, ``2-999``, ``0,3``, ``0-9:3``."""
    if first == last:
        return str(first)
    if step == 1:
        return f"{first}-{last}"
    if last - first == step:
        return f"{first},{last}"
    return f"{first}-{last}:{step}"


def task_text(ranges: str, throttle: int | None) -> str:
    """``ranges`` with the array's throttle (``sbatch -a 0-9%2``: at most 2 at a time)."""
    return f"{ranges}%{throttle}" if throttle else ranges


def combined_id(array_id: str, ranges: str, throttle: int | None) -> str:
    """squeue's JOBID of an array's waiting members shown as one row: ``1009_[2-999%2]``."""
    return f"{array_id}_[{task_text(ranges, throttle)}]"


_RUN: Final = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?", re.ASCII)
_COMBINED: Final = re.compile(r"(\d+)_\[([^\]]*)\]", re.ASCII)
#: The most members a combined id is expanded to (the most indices an array may have).
MAX_MEMBERS: Final = 1_000_000


def member_ids(job_id: str) -> list[str] | None:
    """The members a combined id names (``1009_[2-4,7%2]`` → ``1009_2 … 1009_4, 1009_7``:
    what ``scancel 1009_[2-4,7]`` takes), in order; None when ``job_id`` is no such id. A
    ``ValueError`` for one that cannot be read, or that the listing cut (``…,...``)."""
    match = _COMBINED.fullmatch(job_id)
    if match is None:
        return None
    array, text = match[1], match[2].partition("%")[0]
    if text.endswith("..."):
        raise ValueError(
            f"{job_id!r} was cut short by the listing: list the members (fusesched jobs -r "
            f"-j {array}) or give the whole array ({array})"
        )
    found: list[int] = []
    for piece in text.split(","):
        run = _RUN.fullmatch(piece.strip())
        if run is None:
            raise ValueError(f"cannot read {piece!r} in {job_id!r} (examples: 3, 2-9, 0-8:2)")
        first = int(run[1])
        last = int(run[2]) if run[2] is not None else first
        step = int(run[3]) if run[3] is not None else 1
        if last < first or step < 1:
            raise ValueError(f"{piece!r} in {job_id!r} runs backwards or has no step")
        if len(found) + (last - first) // step + 1 > MAX_MEMBERS:
            raise ValueError(f"{job_id!r} names more than {MAX_MEMBERS:,} members")
        found.extend(range(first, last + 1, step))
    return [f"{array}_{i}" for i in dict.fromkeys(found)]
