"""The fields ``fusesched sacct -o`` takes, by Slurm's sacct's names (any case), and
``sacct -e``'s list of them.

Each field reads a job's view (``GET /v1/jobs``), or a step's job-like view
(:mod:`fusesched.cli.sacct_steps`), with its usage: the job's efficiency view for the fields
marked ``usage``, a step's summary figures. Where fusesched keeps no figure that Slurm would
show, the field is accepted and shows what Slurm's shows without one: blank (``MaxVMSize``,
``MaxDiskRead``, ``UserCPU``, ``Flags``, …), ``Unknown`` (``ReqCPUFreq``), ``00:00:00``
(``Suspended``: fusesched suspends no job). Slurm's widths, its blank fields of a job's own
row (the per-task figures, when it has step rows: :mod:`fusesched.cli.sacct_usage`) and of a
step's row (the job's alone: ``User``, ``Partition``, ``Timelimit``, ``WorkDir``, …).
"""

from __future__ import annotations

import grp
import math
import pwd
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from fusesched.cli import sacct_usage as su
from fusesched.cli.clusters import CLUSTER_NAME
from fusesched.cli.sacct_format import (
    _alloc_tres,
    _cpu_time_s,
    _cpus,
    _elapsed_s,
    _eligible,
    _memory,
    _node_list,
    _number,
    _restarts,
    _stamp,
    _timelimit,
    _total_cpu,
    duration,
    exit_code,
    sacct_state,
    tres,
)
from fusesched.cli.sacct_steps import steps
from fusesched.model import step_summary as ss

Job = dict[str, Any]
Usage = dict[str, Any]
Value = Callable[[Job, Usage, float], str]
#: A size field's amount (None: unknown, blank), for ``--units`` and ``--noconvert``.
Amount = Callable[[Job, Usage, float], float | None]


class Field(NamedTuple):
    """One of sacct's fields: its header, default width (negative: left-justified, as sacct's
    JobID) and value; ``usage``: it needs the job's efficiency view; ``detail``: the job's
    detailed view (``GET /v1/jobs?detail=true``) or its steps; ``steps``: step rows show it
    (else blank); ``size``: a size's amount, in units of ``kilo``**``base`` (``--units``,
    ``--noconvert`` show it so: MaxRSS, AveRSS, ReqMem, ConsumedEnergy)."""

    header: str
    width: int
    value: Value
    usage: bool = False
    detail: bool = False
    steps: bool = True
    size: Amount | None = None
    base: int = 0
    kilo: int = 1024


def _plain(key: str, default: str = "") -> Value:
    return lambda job, _u, _n: str(job.get(key) or default)


def _fixed(text: str) -> Value:
    return lambda _j, _u, _n: text


_NONE: Final = _fixed("")


# ---------------------------------------------------------------------- values


def _stats(pick: Callable[[su.TaskStats], Any], show: Callable[[Any], str]) -> Value:
    """A per-task figure of the row (blank: unknown)."""

    def value(job: Job, usage: Usage, _now: float) -> str:
        found = pick(su.row_stats(job, usage))
        return "" if found is None or found == "" else show(found)

    return value


def _seconds(value: float) -> str:
    return duration(int(value))  # (Slurm's AveCPU, MinCPU: whole seconds)


def _joules(job: Job) -> int:
    """What the job's run drew, in joules (0: not known, as Slurm's job without it)."""
    kwh = job.get("energy_kwh")
    return 0 if kwh is None else round(float(kwh) * 3.6e6)


def _energy(raw: bool) -> Value:
    """ConsumedEnergy(Raw): the job's; a step's ``0`` (fusesched measures jobs, not steps)."""

    def value(job: Job, _u: Usage, _n: float) -> str:
        joules = _energy_joules(job, _u, _n)
        return str(joules) if raw else su.energy(joules)

    return value


def _energy_joules(job: Job, _u: Usage, _n: float) -> int:
    return 0 if job.get("step") is not None else _joules(job)


def _req_mem_mib(_j: Job, usage: Usage, _n: float) -> float | None:
    """ReqMem's amount: the memory asked for in mebibytes (None: unknown)."""
    n = usage.get("memory_bytes")
    return None if n is None else math.ceil(n / 2**20)


def _rss(pick: Callable[[su.TaskStats], int | None]) -> Amount:
    """MaxRSS's or AveRSS's amount in bytes (None: unknown)."""
    return lambda job, usage, _n: pick(su.row_stats(job, usage))


def _account(job: Job) -> pwd.struct_passwd | None:
    """The job's user on this machine (as Slurm's ``--use-local-uid``); None: unknown here."""
    try:
        return pwd.getpwnam(str(job.get("user") or ""))
    except (KeyError, ValueError):
        return None


def _uid(job: Job, _u: Usage, _n: float) -> str:
    found = _account(job)
    return "" if found is None else str(found.pw_uid)


def _gid(job: Job, _u: Usage, _n: float) -> str:
    found = _account(job)
    return "" if found is None else str(found.pw_gid)


def _group(job: Job, _u: Usage, _n: float) -> str:
    found = _account(job)
    if found is None:
        return ""
    try:
        return grp.getgrgid(found.pw_gid).gr_name
    except KeyError:
        return str(found.pw_gid)


def _req_tres(job: Job, usage: Usage, _n: float) -> str:
    """``cpu=4,mem=4G,node=1,gres/gpu=1``: what the job asks for (started or not)."""
    return tres(job, usage, float(job.get("cpus") or 0), _req_nodes(job))


def _req_nodes(job: Job) -> int:
    """The nodes a job asks for (a step's: its nodes)."""
    if job.get("step") is not None:
        return len(job.get("nodes") or [])
    return int(job.get("min_nodes") or len(job.get("nodes") or []) or 1)


def _derived_exit(job: Job, _u: Usage, _n: float) -> str:
    """The worst exit of the job's steps (``code:signal``), else the job's own."""
    codes = [int(s["exit_code"]) for s in steps(job) if s.get("exit_code") is not None]
    code = ss.worst_exit(codes) if codes else job.get("exit_code")
    if code is None or code == -1:
        return "0:0"
    return f"0:{-code}" if code < 0 else f"{code}:0"


def _id_raw(job: Job, _u: Usage, _n: float) -> str:
    """The job's id; an array's waiting members shown as one row (``12_[3-9]``): the
    array's, as Slurm's sacct's pending array record."""
    if job.get("array_tasks") and job.get("array_parent"):
        return str(job["array_parent"])
    return str(job["id"])


def _timelimit_raw(job: Job, _u: Usage, _n: float) -> str:
    """The time limit in whole minutes (``UNLIMITED``: none)."""
    limit = job.get("time_limit_s")
    return "UNLIMITED" if limit is None else str(math.ceil(limit / 60))


def _planned_s(job: Job, now: float) -> int:
    """How long the job waited once eligible: to its start, its end when it never started,
    else till now (0 while it is not eligible: waiting for dependencies, or held)."""
    eligible = job.get("submit_time")
    if eligible is None or _eligible(job) == "Unknown":
        return 0
    start, end = job.get("start_time"), job.get("end_time")
    until = start if start is not None else (end if end is not None else now)
    return max(0, int(until - eligible))


def _planned_cpu_s(job: Job, now: float) -> int:
    return int(_planned_s(job, now) * float(job.get("cpus") or 0))


_PLANNED: Final = (
    lambda j, _u, n: duration(_planned_s(j, n)),
    lambda j, _u, n: duration(_planned_cpu_s(j, n)),
    lambda j, _u, n: str(_planned_cpu_s(j, n)),
)


def _job_only(
    header: str, width: int, value: Value = _NONE, usage: bool = False, detail: bool = False
) -> Field:
    return Field(header, width, value, usage=usage, detail=detail, steps=False)


def _usage(header: str, width: int, value: Value) -> Field:
    return Field(header, width, value, usage=True)


#: Fields Slurm's sacct has that fusesched keeps no figure for: blank on every row.
_ALWAYS_BLANK: Final = (
    *(("AveCPUFreq", 10), ("AveDiskRead", 14), ("AveDiskWrite", 14), ("AvePages", 10)),
    *(("AveVMSize", 10), ("Container", 10), ("Layout", 9), ("MaxDiskRead", 12)),
    *(("MaxDiskReadNode", 15), ("MaxDiskReadTask", 15), ("MaxDiskWrite", 12)),
    *(("MaxDiskWriteNode", 16), ("MaxDiskWriteTask", 16), ("MaxPages", 8)),
    *(("MaxPagesNode", 12), ("MaxPagesTask", 14), ("MaxVMSize", 10), ("MaxVMSizeNode", 14)),
    *(("MaxVMSizeTask", 14), ("SubmitLine", 10), ("SystemCPU", 10), ("UserCPU", 10)),
    *(("TRESUsageInAve", 14), ("TRESUsageInMax", 14), ("TRESUsageInMaxNode", 18)),
    *(("TRESUsageInMaxTask", 18), ("TRESUsageInMin", 14), ("TRESUsageInMinNode", 18)),
    *(("TRESUsageInMinTask", 18), ("TRESUsageInTot", 14), ("TRESUsageOutAve", 15)),
    *(("TRESUsageOutMax", 15), ("TRESUsageOutMaxNode", 19), ("TRESUsageOutMaxTask", 19)),
    *(("TRESUsageOutMin", 15), ("TRESUsageOutMinNode", 19), ("TRESUsageOutMinTask", 19)),
    ("TRESUsageOutTot", 15),
)
#: The same, of a job's own row alone (blank on a step's too, as Slurm's).
_JOB_BLANK: Final = (
    *(("AdminComment", 15), ("AssocID", 7), ("BlockID", 16)),
    *(("Flags", 19), ("McsLabel", 12), ("QOSRAW", 6), ("Reservation", 20)),
    *(("ReservationId", 8), ("SystemComment", 15), ("WCKey", 10), ("WCKeyID", 10)),
)
#: Slurm's requested CPU frequencies, which fusesched does not take: ``Unknown``, as Slurm's
#: without one.
_CPU_FREQS: Final = (
    ("ReqCPUFreq", 10),
    ("ReqCPUFreqMin", 13),
    ("ReqCPUFreqMax", 13),
    ("ReqCPUFreqGov", 13),
)

_TABLE: Final = (
    Field("JobID", -12, lambda j, _u, _n: str(j["id"])),
    Field("JobIDRaw", -12, _id_raw),
    Field("JobName", 10, _plain("name")),
    _job_only("User", 9, _plain("user")),
    _job_only("Partition", 10, _plain("queue")),
    Field("Account", 10, _plain("tenant")),
    _job_only("QOS", 10, _plain("qos")),
    Field("State", 10, lambda j, _u, _n: sacct_state(j)),
    Field("ExitCode", 8, lambda j, _u, _n: exit_code(j)),
    _job_only("Reason", 20, _plain("reason", "None")),
    Field("Submit", 19, lambda j, _u, _n: _stamp(j.get("submit_time"))),
    Field("Eligible", 19, lambda j, _u, _n: _eligible(j)),
    Field("Start", 19, lambda j, _u, _n: _stamp(j.get("start_time"))),
    Field("End", 19, lambda j, _u, _n: _stamp(j.get("end_time"))),
    Field("Elapsed", 10, lambda j, _u, n: duration(_elapsed_s(j, n))),
    Field("ElapsedRaw", 10, lambda j, _u, n: str(_elapsed_s(j, n))),
    _job_only("Timelimit", 10, lambda j, _u, _n: _timelimit(j)),
    _job_only("TimelimitRaw", 10, _timelimit_raw),
    Field("AllocCPUS", 10, lambda j, _u, _n: _number(_cpus(j))),
    Field("NCPUS", 10, lambda j, _u, _n: _number(_cpus(j))),
    Field("AllocNodes", 10, lambda j, _u, _n: str(len(j.get("nodes") or []))),
    _usage("AllocTRES", -40, lambda j, u, _n: _alloc_tres(j, u)),
    _job_only("ReqTRES", 10, _req_tres, usage=True),
    Field("NodeList", -15, lambda j, _u, _n: _node_list(j)),
    Field("NNodes", 8, lambda j, _u, _n: str(len(j.get("nodes") or []) or j.get("min_nodes") or 1)),
    Field("ReqNodes", 8, lambda j, _u, _n: str(_req_nodes(j))),
    _usage("NTasks", 8, lambda _j, u, _n: str(u.get("tasks_count") or "")),
    Field("ReqCPUS", 8, lambda j, _u, _n: _number(float(j.get("cpus") or 0))),
    Field(
        "ReqMem",
        10,
        lambda _j, u, _n: _memory(u.get("memory_bytes")),
        usage=True,
        steps=False,
        size=_req_mem_mib,
        base=2,
    ),
    _usage("MaxRSS", 10, _stats(lambda s: s.max_rss, su.slurm_size))._replace(
        size=_rss(lambda s: s.max_rss)
    ),
    _usage("MaxRSSNode", 10, _stats(lambda s: s.max_rss_node, str)),
    _usage("MaxRSSTask", 10, _stats(lambda s: s.max_rss_task, str)),
    _usage("AveRSS", 10, _stats(lambda s: s.ave_rss, su.slurm_size))._replace(
        size=_rss(lambda s: s.ave_rss)
    ),
    _usage("AveCPU", 10, _stats(lambda s: s.ave_cpu, _seconds)),
    _usage("MinCPU", 10, _stats(lambda s: s.min_cpu, _seconds)),
    _usage("MinCPUNode", 10, _stats(lambda s: s.min_cpu_node, str)),
    _usage("MinCPUTask", 10, _stats(lambda s: s.min_cpu_task, str)),
    _usage("TotalCPU", 10, lambda _j, u, _n: _total_cpu(u)),
    Field("CPUTime", 10, lambda j, _u, n: duration(_cpu_time_s(j, n))),
    Field("CPUTimeRAW", 10, lambda j, _u, n: str(_cpu_time_s(j, n))),
    Field("ConsumedEnergy", 14, _energy(raw=False), size=_energy_joules, kilo=1000),
    Field("ConsumedEnergyRaw", 17, _energy(raw=True)),
    _job_only("Priority", 10, lambda j, _u, _n: str(j.get("priority", 0))),
    _job_only("Restarts", 8, lambda j, _u, _n: _restarts(j), detail=True),
    _job_only("DerivedExitCode", 15, _derived_exit, detail=True),
    Field("Cluster", 10, _fixed(CLUSTER_NAME)),
    _job_only("Comment", 14, _plain("comment")),
    # the node features it asked for (sbatch --constraint), where the controller serves them
    # (a view's "constraints"; today's serves none: blank, as Slurm's job without them)
    _job_only("Constraints", 19, _plain("constraints")),
    _job_only("WorkDir", 20, _plain("workdir")),
    _job_only("UID", 6, _uid),
    _job_only("GID", 6, _gid),
    _job_only("Group", 9, _group),
    Field("DBIndex", 10, _plain("seq")),
    Field("Suspended", 10, _fixed("00:00:00")),
    *(Field(name, width, _fixed("Unknown")) for name, width in _CPU_FREQS),
    _job_only("Reserved", 10, _PLANNED[0]),
    _job_only("ResvCPU", 10, _PLANNED[1]),
    _job_only("ResvCPURAW", 10, _PLANNED[2]),
    _job_only("Planned", 10, _PLANNED[0]),
    _job_only("PlannedCPU", 10, _PLANNED[1]),
    _job_only("PlannedCPURAW", 13, _PLANNED[2]),
    *(Field(name, width, _NONE) for name, width in _ALWAYS_BLANK),
    *(_job_only(name, width) for name, width in _JOB_BLANK),
)

#: sacct's fields by lower-case name.
FIELDS: Final[dict[str, Field]] = {f.header.lower(): f for f in _TABLE}
#: The fields accepted that are blank on every row (fusesched keeps no such figure).
ALWAYS_BLANK: Final = frozenset(name for name, _ in (*_ALWAYS_BLANK, *_JOB_BLANK))
#: The columns of ``sacct -e``, and the width of each (a name, then a space).
HELP_COLUMNS: Final = 4
HELP_WIDTH: Final = 19


def ordered() -> list[Field]:
    """The fields in ``-e``'s order (alphabetical, any case), as Slurm's sacct holds them:
    ``-o``'s ``ALL`` and the field a name's start picks (the first that starts so)."""
    return sorted(FIELDS.values(), key=lambda f: f.header.lower())


def helpformat() -> str:
    """``sacct -e``: the fields' names in alphabetical order (any case), four a line, each
    in :data:`HELP_WIDTH` columns, a space between, as Slurm's sacct prints them."""
    names = [f.header for f in ordered()]
    rows = (names[i : i + HELP_COLUMNS] for i in range(0, len(names), HELP_COLUMNS))
    return "".join(" ".join(n.ljust(HELP_WIDTH) for n in row) + "\n" for row in rows)
