"""Lists of jobs as people give and read them: comma lists of names (``-u a,b -u c``), job ids
(``12``, ``13_2``) and the bracket form of an array's members (``12_[0-3,7]``), and an array's
summary by state. Used by ``fusesched jobs``, ``sacct``, ``sinfo``, ``cancel``, ``hold``…"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Final

Job = dict[str, Any]


def comma_list(given: Iterable[str] | None, what: str) -> list[str]:
    """Repeated options, each a comma list, as one list (``-u a,b -u c``); a ``ValueError``
    for an empty item."""
    out: list[str] = []
    for item in given or ():
        for raw in item.split(","):
            value = raw.strip()
            if not value:
                raise ValueError(f"an empty {what} in {item!r}")
            out.append(value)
    return out


_JOB_ID: Final = re.compile(r"[0-9]{1,18}(_[0-9]{1,9})?")


def job_ids(given: Iterable[str] | None) -> list[str]:
    """``-j 12,13_2``: job ids, an array's members (``13_2``) and whole arrays (``13``); a
    ``ValueError`` for anything else."""
    ids = comma_list(given, "job id")
    for job_id in ids:
        if not _JOB_ID.fullmatch(job_id):
            raise ValueError(
                f"bad job id {job_id!r}: a job id (12), an array member (12_3) or an array (12)"
            )
    return ids


def short_ids(ids: Sequence[str]) -> str:
    """Job ids for a person to read: an array's members in Slurm's bracket form
    (``12_[0-3,7]``), other ids as they are, comma separated, in order of first appearance."""
    from fusesched.hostlist import compress_hostlist

    members: dict[tuple[str, bool], list[str]] = {}  # (an array's members apart from a job)
    for job_id in ids:
        array, _, index = job_id.partition("_")
        member = index.isascii() and index.isdigit()
        members.setdefault((array, True) if member else (job_id, False), []).append(job_id)
    parts = []
    for found in members.values():
        if len(found) == 1:
            parts.append(found[0])
        else:
            found.sort(key=lambda j: int(j.partition("_")[2]))
            parts.append(compress_hostlist(found))
    return ", ".join(parts)


def counted_ids(ids: Sequence[str]) -> str:
    """``12_[0-999] (1000 jobs)``: the jobs an action reached (:func:`short_ids`), counted
    when more than one."""
    return short_ids(ids) + (f" ({len(ids)} jobs)" if len(ids) > 1 else "")


def array_summary(array_id: str, members: Sequence[Job], complete: bool = True) -> str:
    """``array 5: 10 members: 3 RUNNING, 7 PENDING`` (states by how many, most first); when
    ``members`` are only the newest of them, ``array 5: the newest 1000 members: …``."""
    from fusesched.cli.squeue_format import slurm_state

    counts: dict[str, int] = {}
    for job in members:
        counts[slurm_state(job)] = counts.get(slurm_state(job), 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    said = ", ".join(f"{n} {state}" for state, n in ranked)
    listed = f"{len(members)} members" if complete else f"the newest {len(members)} members"
    return f"array {array_id}: {listed}: {said}"
