"""squeue's fields (``-o "%.10i %T"``, ``-O "JobID,Name:20"``): each letter's header and value
as Slurm 22.05's squeue prints it, from a job's view (``GET /v1/jobs``).

A value fusesched does not keep is what Slurm prints for it when unset: ``(null)`` (features,
wckey), ``*`` (sockets, cores, threads), ``0`` (nice, temporary disk, contiguous), ``OK``
(oversubscribe), ``N/A`` (core specialisation), so that a tool that asks for every letter
(Open OnDemand does) reads each as it reads Slurm's. Pure functions; the user and group ids
are this machine's for the job's user name (as Slurm's ``--use-local-uid``). The ``-O`` names
are in :mod:`fusesched.cli.squeue_long_fields` (named here too).

``%Q`` is the job's own priority (``sbatch --priority``; 0 while it is held, as Slurm's, whose
hold is priority 0), not the multifactor total that ``sprio`` shows (each job's would be a
call of its own); ``%p`` is the same normalised as Slurm prints it, divided by 2**32 - 1 and
written with 14 decimals (``0.00000002328306`` for 100).
"""

from __future__ import annotations

import grp
import math
import pwd
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Final, NamedTuple

from fusesched.cli.squeue_long_fields import LONG_FIELDS as LONG_FIELDS
from fusesched.cli.squeue_states import slurm_state, state_code

Job = dict[str, Any]
GPU: Final = "nvidia.com/gpu"
#: What squeue prints for a value that is not set.
NULL: Final = "(null)"


def slurm_time(seconds: float) -> str:
    """A duration as squeue writes one: ``M:SS``, ``H:MM:SS``, ``D-HH:MM:SS``."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def _stamp(t: float | None) -> str:
    return "N/A" if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _used(job: Job) -> str:
    start, end = job.get("start_time"), job.get("end_time")
    if start is None:
        return "0:00"
    return slurm_time((end if end is not None else time.time()) - start)


def _limit(job: Job) -> str:
    limit = job.get("time_limit_s")
    return "UNLIMITED" if limit is None else slurm_time(math.ceil(limit))


def end_time(job: Job) -> float | None:
    """``%e``'s time: the job's end; a running job's is when its time limit runs out (as
    squeue); None: not known."""
    if job.get("end_time") is not None:
        return float(job["end_time"])
    limit, start = job.get("time_limit_s"), job.get("start_time")
    return float(start + limit) if start is not None and limit is not None else None


def _end(job: Job) -> str:
    return _stamp(end_time(job))


#: What Slurm divides a priority by for ``%p`` (its largest, ``0xffffffff``).
PRIORITY_SCALE: Final = 2**32 - 1


def priority(job: Job) -> int:
    """``%Q``: the job's own priority; 0 while it is held (as Slurm's: a hold is priority 0)."""
    if job.get("phase") == "held":
        return 0
    try:
        return int(job.get("priority") or 0)
    except (TypeError, ValueError):
        return 0


def _normalised_priority(job: Job) -> str:
    """``%p``: :func:`priority` as Slurm writes it, a fraction of 2**32 - 1 to 14 decimals."""
    return f"{priority(job) / PRIORITY_SCALE:16.14f}"


def _nodes(job: Job) -> str:
    """Slurm's short form of the job's nodes (``node[1-4]``), in their order."""
    from fusesched.hostlist import compress_hostlist

    return compress_hostlist(job.get("nodes") or [])


def _node_count(job: Job) -> str:
    held = job.get("nodes") or []
    return str(len(held) if held else job.get("min_nodes") or 1)


def _cpus(job: Job) -> str:
    """Whole cores as an integer, part cores to the milli-core (``0.5``), never ``1e+06``."""
    cpus = job.get("cpus")
    if cpus is None:
        return "N/A"
    text = f"{cpus:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def _gres(job: Job) -> str:
    """``gres/gpu:2``; other accelerators by their names (``gres/nvidia.com/mig-1g.10gb:1``,
    ``gres/fusesched.io/gpu-milli:500``), comma-separated; ``N/A`` for none."""
    kinds = job.get("accelerators")
    if kinds is None:  # (a controller older than the field)
        kinds = {GPU: job["gpus"]} if job.get("gpus") else {}
    said = [f"gres/{'gpu' if k == GPU else k}:{n}" for k, n in kinds.items() if n]
    return ",".join(said) or "N/A"


def _reason(job: Job) -> str:
    return job.get("reason") or "None"


def _reason_or_nodes(job: Job) -> str:
    """squeue's ``%R``: a waiting job's reason in brackets, else the nodes it ran on."""
    if job.get("state") == "Pending" or not job.get("nodes"):
        return f"({_reason(job)})"
    return _nodes(job)


def _array_id(job: Job) -> str:
    return str(job.get("array_parent") or job["id"])


def _array_index(job: Job) -> str:
    """``%K``: the member's index; an array's waiting members shown as one row: theirs
    (``2-999%2``, with the throttle, as squeue)."""
    if job.get("array_tasks"):
        return str(job["array_tasks"])
    parent = job.get("array_parent")
    return str(job["id"]).rpartition("_")[2] if parent else "N/A"


def _job_id(job: Job) -> str:
    """``%A``: the job's own id (a member's ``9_3``); for an array's waiting members shown
    as one row, the array's (as squeue: the id of the array's own record)."""
    return str(job.get("array_parent") if job.get("array_tasks") else job["id"])


def _time_left(job: Job) -> str:
    """``%L``: the time limit less the time used (``UNLIMITED`` without a limit; never
    negative)."""
    limit, start = job.get("time_limit_s"), job.get("start_time")
    if limit is None:
        return "UNLIMITED"
    if start is None:
        return slurm_time(math.ceil(limit))
    end = job.get("end_time")
    used = int((end if end is not None else time.time()) - start)  # (whole seconds, as %M)
    return slurm_time(max(0, math.ceil(limit) - used))


def _batch_host(job: Job) -> str:
    """``%B``: the node that runs the job's first task (``n/a`` before it has one)."""
    nodes = job.get("nodes") or []
    return str(nodes[0]) if nodes else "n/a"


def _min_cpus(job: Job) -> str:
    """``%c``: the CPUs each task asks for (``1`` when the job's tasks differ or it is not
    known)."""
    each = job.get("cpus_per_task")
    if not each:
        return "1"
    return f"{each:.3f}".rstrip("0").rstrip(".") or "0"


def _dependency(job: Job) -> str:
    """``%E``: the dependencies a waiting job still waits for, as squeue writes them
    (``afterok:12(unfulfilled),singleton(unfulfilled)``; ``(failed)`` when they never will
    be met); ``(null)`` for none, or once it no longer waits for them."""
    from fusesched.cli.slurm_reasons import slurm_reason

    deps = job.get("dependencies") or []
    if job.get("state") != "Pending" or not deps:
        return NULL
    code = slurm_reason(job.get("reason"))
    if code not in ("Dependency", "DependencyNeverSatisfied"):
        return NULL
    mark = "(failed)" if code == "DependencyNeverSatisfied" else "(unfulfilled)"
    said = [f"{d['kind']}:{d['job_id']}" if d.get("job_id") else str(d["kind"]) for d in deps]
    return ",".join(f"{text}{mark}" for text in said)


@lru_cache(maxsize=256)
def _account(user: str) -> tuple[int, int, str] | None:
    """The user's uid, gid and group name on this machine; None: unknown here."""
    try:
        found = pwd.getpwnam(user)
    except (KeyError, ValueError):
        return None
    try:
        group = grp.getgrgid(found.pw_gid).gr_name
    except KeyError:
        group = str(found.pw_gid)
    return found.pw_uid, found.pw_gid, group


def _ids(pick: int) -> Callable[[Job], str]:
    """``%U``, ``%G``, ``%g``: the user's uid, gid or group name here (``N/A``: unknown)."""

    def value(job: Job) -> str:
        found = _account(str(job.get("user") or ""))
        return "N/A" if found is None else str(found[pick])

    return value


def _licenses(job: Job) -> str:
    """``%W``: ``name:count`` each, comma-separated, by name; ``(null)`` for none."""
    held = job.get("licenses") or {}
    return ",".join(f"{name}:{n}" for name, n in sorted(held.items())) or NULL


def _sched_nodes(job: Job) -> str:
    """``%Y``: the nodes a waiting job would start on (``squeue --start``); ``(null)``."""
    from fusesched.hostlist import compress_hostlist

    nodes = job.get("sched_nodes") or []
    return compress_hostlist(list(nodes)) if nodes else NULL


def _text(key: str, unset: str = NULL) -> Callable[[Job], str]:
    """A text field of the view as it is; ``unset`` when empty or not shown."""
    return lambda job: str(job.get(key) or unset)


def _fixed(text: str) -> Callable[[Job], str]:
    """A value fusesched does not keep: what squeue prints when it is not set."""
    return lambda _job: text


class Field(NamedTuple):
    header: str
    value: Callable[[Job], str]


#: ``-o`` fields by letter.
FIELDS: Final[dict[str, Field]] = {
    "i": Field("JOBID", lambda j: str(j["id"])),
    "A": Field("JOBID", _job_id),
    "F": Field("ARRAY_JOB_ID", _array_id),
    "K": Field("ARRAY_TASK_ID", _array_index),
    "j": Field("NAME", lambda j: str(j.get("name") or "")),
    "u": Field("USER", lambda j: str(j.get("user") or "")),
    "U": Field("UID", _ids(0)),
    "g": Field("GROUP", _ids(2)),
    "G": Field("GROUP", _ids(1)),
    "a": Field("ACCOUNT", lambda j: str(j.get("tenant") or "")),
    "t": Field("ST", state_code),
    "T": Field("STATE", slurm_state),
    "P": Field("PARTITION", lambda j: str(j.get("queue") or "")),
    "q": Field("QOS", lambda j: str(j.get("qos") or "N/A")),
    "M": Field("TIME", _used),
    "l": Field("TIME_LIMIT", _limit),
    "L": Field("TIME_LEFT", _time_left),
    "D": Field("NODES", _node_count),
    "C": Field("CPUS", _cpus),
    "c": Field("MIN_CPUS", _min_cpus),
    "m": Field("MIN_MEMORY", _text("min_memory", "0")),
    "d": Field("MIN_TMP_DISK", _fixed("0")),
    "b": Field("TRES_PER_NODE", _gres),
    "r": Field("REASON", _reason),
    "R": Field("NODELIST(REASON)", _reason_or_nodes),
    "N": Field("NODELIST", _nodes),
    "B": Field("EXEC_HOST", _batch_host),
    "n": Field("REQ_NODES", _fixed("")),
    "x": Field("EXC_NODES", _fixed("")),
    "Y": Field("SCHEDNODES", _sched_nodes),
    "V": Field("SUBMIT_TIME", lambda j: _stamp(j.get("submit_time"))),
    "S": Field("START_TIME", lambda j: _stamp(j.get("start_time"))),
    "e": Field("END_TIME", _end),
    "p": Field("PRIORITY", _normalised_priority),
    "Q": Field("PRIORITY", lambda j: str(priority(j))),
    "y": Field("NICE", _fixed("0")),
    "E": Field("DEPENDENCY", _dependency),
    "k": Field("COMMENT", _text("comment")),
    "o": Field("COMMAND", _text("command")),
    "Z": Field("WORK_DIR", _text("workdir")),
    "v": Field("RESERVATION", _text("reservation")),
    "W": Field("LICENSES", _licenses),
    "f": Field("FEATURES", _fixed(NULL)),
    "w": Field("WCKEY", _fixed(NULL)),
    "h": Field("OVER_SUBSCRIBE", _fixed("OK")),
    "O": Field("CONTIGUOUS", _fixed("0")),
    "H": Field("SOCKETS_PER_NODE", _fixed("*")),
    "I": Field("CORES_PER_SOCKET", _fixed("*")),
    "J": Field("THREADS_PER_CORE", _fixed("*")),
    "z": Field("S:C:T", _fixed("*:*:*")),
    "X": Field("CORE_SPEC", _fixed("N/A")),
}
