"""An array's members in Slurm's short form: ``2-999%2`` (indices 2 to 999, at most 2
running at a time), ``1,4-6``, ``0-998:2`` (every second index): what squeue prints for
the members of an array that wait as one row (``1009_[2-999%2]``)."""

from __future__ import annotations

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
