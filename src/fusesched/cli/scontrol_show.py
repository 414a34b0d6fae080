"""What ``fusesched scontrol show`` prints: jobs, nodes, partitions, reservations and licenses
as Slurm's scontrol writes them, ``Key=Value`` pairs on indented lines (a blank line after
each record), or a record a line with ``-o``. Pure: records from the API's views.

Only what fusesched knows is shown. A job's working folder, output files, dependencies and
command are not in its API view (``GET /v1/jobs/{id}``) and are left out, not guessed; its
reason is Slurm's one word (the full text: ``fusesched show``); its partition is its queue
(as squeue's), a node's its pool (as sinfo's).
"""

from __future__ import annotations

import math
import pwd
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from fusesched.cli.live import slurm_duration, slurm_hms
from fusesched.cli.sacct_format import exit_code
from fusesched.cli.sinfo_format import NodeInfo, node_info
from fusesched.cli.squeue_format import slurm_state
from fusesched.hostlist import compress_hostlist

#: A record: its lines, each ``(key, value)`` pairs.
Record = list[list[tuple[str, str]]]
Job = dict[str, Any]

NULL: Final = "(null)"
UNKNOWN: Final = "Unknown"
#: The one-word reasons of fusesched's reasons that are not one already (their first words
#: otherwise: ``Resources``, ``Priority``, ``Dependency``, ``QuotaExceeded``…).
REASON_WORDS: Final = (
    ("held by administrator", "JobHeldAdmin"),
    ("held", "JobHeldUser"),
    ("begin time", "BeginTime"),
    ("waiting for licenses", "Licenses"),
    ("reservation", "Reservation"),
)
GPU: Final = "nvidia.com/gpu"


def stamp(t: float | None) -> str:
    """A time as scontrol writes one (local time, ISO, no zone); ``Unknown`` when none."""
    return UNKNOWN if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def render(records: Iterable[Record], oneliner: bool) -> str:
    """The records as scontrol prints them: each line's pairs after three spaces (the
    first line's at the margin) and a blank line after each, or (``oneliner``) a record a
    line."""
    out: list[str] = []
    for record in records:
        lines = [" ".join(f"{k}={v}" for k, v in pairs) for pairs in record if pairs]
        if oneliner:
            out.append(" ".join(lines) + "\n")
        else:
            out.append("\n".join([lines[0], *(f"   {line}" for line in lines[1:])]) + "\n\n")
    return "".join(out)


# ---------------------------------------------------------------------- jobs


def reason_word(job: Job) -> str:
    """The job's reason as Slurm's one word: a waiting job's (its hold, begin time, licenses
    or reservation, else the first word of fusesched's: ``Resources``, ``Dependency``…), a
    failed one's ``NonZeroExitCode`` or ``TimeLimit``; else ``None``."""
    text = str(job.get("reason") or "")
    if job.get("state") == "Pending" and text:
        for start, word in REASON_WORDS:
            if text.startswith(start):
                return word
        first = text.replace(";", " ").replace(":", " ").split()[0]
        return first if first.isalnum() and first[0].isupper() else "None"
    state = slurm_state(job)
    if state == "TIMEOUT":
        return "TimeLimit"
    if state == "FAILED":
        return "NonZeroExitCode"
    return "None"


def _user(name: str) -> str:
    """``name(uid)`` as Slurm writes a user, when this machine knows the name."""
    try:
        return f"{name}({pwd.getpwnam(name).pw_uid})"
    except (KeyError, ValueError):
        return name


def _number(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


def _tasks(job: Job) -> str | None:
    cpus, each = job.get("cpus"), job.get("cpus_per_task")
    if not cpus or not each:
        return None
    return str(max(1, round(cpus / each)))


def _tres(job: Job, nodes: int) -> str:
    parts = [f"cpu={_number(float(job.get('cpus') or 0))}", f"node={nodes}"]
    kinds = job.get("accelerators") or ({GPU: job["gpus"]} if job.get("gpus") else {})
    parts.extend(f"gres/{'gpu' if k == GPU else k}={n}" for k, n in kinds.items() if n)
    return ",".join(parts)


def _times(job: Job, now: float) -> list[tuple[str, str]]:
    start, end, limit = job.get("start_time"), job.get("end_time"), job.get("time_limit_s")
    run = 0 if start is None else max(0, int((end if end is not None else now) - start))
    if end is None and start is not None and limit is not None:
        end = start + limit  # (when its time limit runs out, as Slurm's)
    deadline = job.get("deadline")
    return [
        ("RunTime", slurm_hms(run)),
        ("TimeLimit", "UNLIMITED" if limit is None else slurm_duration(limit)),
        ("SubmitTime", stamp(job.get("submit_time"))),
        ("StartTime", stamp(start)),
        ("EndTime", stamp(end)),
        ("Deadline", "N/A" if deadline is None else stamp(deadline)),
    ]


def job_record(job: Job, now: float) -> Record:
    """One job as ``scontrol show job`` writes it."""
    held = job.get("nodes") or []
    nodes = len(held) or int(job.get("min_nodes") or 1)
    first: list[tuple[str, str]] = [("JobId", str(job["id"]))]
    parent = job.get("array_parent")
    if parent:
        first += [("ArrayJobId", str(parent)), ("ArrayTaskId", str(job["id"]).rpartition("_")[2])]
    first.append(("JobName", str(job.get("name") or "")))
    restarts = job.get("restarts")
    counts = [("NumNodes", str(nodes)), ("NumCPUs", _number(float(job.get("cpus") or 0)))]
    tasks = _tasks(job)
    if tasks is not None:
        counts.append(("NumTasks", tasks))
    if job.get("cpus_per_task"):
        counts.append(("CPUs/Task", _number(float(job["cpus_per_task"]))))
    extra = [("Comment", str(job["comment"]))] if job.get("comment") else []
    if job.get("licenses"):
        extra.append(("Licenses", ",".join(f"{n}:{k}" for n, k in sorted(job["licenses"].items()))))
    return [
        first,
        [("UserId", _user(str(job.get("user") or "")))],
        [
            ("Priority", str(job.get("priority", 0))),
            ("Account", str(job.get("tenant") or NULL)),
            ("QOS", str(job.get("qos") or NULL)),
        ],
        [("JobState", slurm_state(job)), ("Reason", reason_word(job))],
        [
            *([] if restarts is None else [("Restarts", str(restarts))]),
            ("BatchFlag", "1" if job.get("batch") else "0"),
            ("ExitCode", exit_code(job)),
        ],
        _times(job, now)[:2],
        _times(job, now)[2:],
        [("Partition", str(job.get("queue") or NULL))],
        [("NodeList", compress_hostlist(held) if held else NULL)],
        counts,
        [("TRES", _tres(job, nodes))],
        extra,
    ]


# ---------------------------------------------------------------------- nodes


def node_state(node: NodeInfo) -> str:
    """A node's state as scontrol writes it: ``IDLE``, ``MIXED``, ``ALLOCATED``, ``DOWN``,
    ``COMPLETING``, with ``+DRAIN`` (drained or draining), ``+POWERED_DOWN`` and
    ``+NOT_RESPONDING``."""
    flags = [node.base.upper()]
    if node.drain is not None:
        flags.append("DRAIN")
    if node.powered_down:
        flags.append("POWERED_DOWN")
    if not node.responding:
        flags.append("NOT_RESPONDING")
    return "+".join(flags)


def node_record(view: Mapping[str, Any]) -> Record:
    """One node (a view of ``GET /v1/nodes``) as ``scontrol show node`` writes it."""
    node = node_info(view)
    labels = view.get("labels") or {}
    record: Record = [
        [("NodeName", node.name), ("Arch", str(labels.get("kubernetes.io/arch") or NULL))],
        [("CPUAlloc", str(node.cpus_alloc)), ("CPUTot", str(node.cpus))],
        [("AvailableFeatures", ",".join(node.features) or NULL)],
        [("Gres", node.gres)],
        [("NodeAddr", node.address or node.name), ("NodeHostName", node.hostname)],
        [("RealMemory", str(node.memory_mb)), ("TmpDisk", str(node.tmp_disk_mb))],
        [("State", node_state(node))],
        [("Partitions", node.partition)],
    ]
    if node.reason != "none":
        when = "" if node.reason_time is None else f"@{stamp(node.reason_time)}"
        record.append([("Reason", f"{node.reason} [{node.reason_user}{when}]")])
    return record


def partition_records(views: Sequence[Mapping[str, Any]]) -> dict[str, Record]:
    """The partitions (fusesched's pools, as sinfo shows them) of the nodes ``views``, by
    name, as ``scontrol show partition`` writes them."""
    nodes = sorted((node_info(v) for v in views), key=lambda n: n.name)
    out: dict[str, Record] = {}
    for name in sorted({n.partition for n in nodes}):
        members = [n for n in nodes if n.partition == name]
        default = "YES" if members[0].default else "NO"
        out[name] = [
            [("PartitionName", name)],
            [("Default", default), ("State", "UP")],
            [("MaxTime", "UNLIMITED")],
            [("Nodes", compress_hostlist([n.name for n in members]))],
            [("TotalCPUs", str(sum(n.cpus for n in members))), ("TotalNodes", str(len(members)))],
        ]
    return out


# ---------------------------------------------------------------------- the rest


def reservation_record(res: Mapping[str, Any]) -> Record:
    """One reservation (``GET /v1/reservations``) as ``scontrol show reservation`` writes
    it; one for no users and no tenants is a maintenance reservation (``Flags=MAINT``)."""
    start, end = float(res["start"]), float(res["end"])
    return [
        [
            ("ReservationName", str(res["name"])),
            ("StartTime", stamp(start)),
            ("EndTime", stamp(end)),
            ("Duration", slurm_hms(max(0, math.ceil(end - start)))),
        ],
        [
            ("Nodes", compress_hostlist(res["nodes"]) or NULL),
            ("NodeCnt", str(len(res["nodes"]))),
            ("Flags", "MAINT" if res.get("maintenance") else ""),
        ],
        [
            ("Users", ",".join(res["users"]) or NULL),
            ("Accounts", ",".join(res["tenants"]) or NULL),
            ("State", "ACTIVE" if res.get("active") else "INACTIVE"),
        ],
    ]


def license_record(lic: Mapping[str, Any]) -> Record:
    """One license (``GET /v1/licenses``) as ``scontrol show licenses`` writes it."""
    return [
        [
            ("LicenseName", str(lic["name"])),
            ("Total", str(lic["total"])),
            ("Used", str(lic["in_use"])),
            ("Free", str(lic["free"])),
            ("Reserved", "0"),
            ("Remote", "no"),
        ]
    ]
