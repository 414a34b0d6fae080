"""What ``fusesched scontrol show`` prints: jobs, nodes, partitions, reservations and licenses
as Slurm's scontrol writes them, ``Key=Value`` pairs on indented lines (a blank line after
each record), or a record a line with ``-o``. Pure: records from the API's views.

Only what fusesched knows is shown: what an older controller's view lacks is left out, not
guessed. A job's reason is Slurm's one word (the full text: ``fusesched show``); its partition
is its queue (as squeue's), a node's its pool (as sinfo's). An array member's ``JobId`` is its
fusesched id (``12_3``: it has no other), followed by Slurm's ``ArrayJobId`` and
``ArrayTaskId``. Its ``StdOut``/``StdErr`` are the files its agent writes (patterns expanded
by the controller, ``%N`` kept until it has a node), and only a batch job's, as Slurm's;
``Command`` is a program's and arguments, ``(null)`` for a batch script (fusesched keeps its
text, not its file) as for Slurm's ``--wrap``. ``Dependency`` lists what a job that has not
started still waits for, as Slurm's: each dependency met left out, the others
``(unfulfilled)`` or, never to be met, ``(failed)``; ``(null)`` when none is left. Whether a
dependency is met is read from the views of the jobs it names (:func:`dependency_targets`
says which the shell fetches); a ``singleton``, which names none, is ``(unfulfilled)`` while
the job waits for its dependencies.
"""

from __future__ import annotations

import math
import pwd
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from fusesched.cli.live import slurm_duration, slurm_hms
from fusesched.cli.sacct_format import exit_code
from fusesched.cli.sinfo_format import NodeInfo, cpu_load_text, free_mem_text, node_info
from fusesched.cli.squeue_format import slurm_state
from fusesched.hostlist import compress_hostlist
from fusesched.model.job import DependencyKind
from fusesched.model.phases import JobPhase

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
#: A batch job's standard input (its tasks read nothing: the agents give them /dev/null).
STDIN: Final = "/dev/null"


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


def _times(job: Job, now: float) -> list[list[tuple[str, str]]]:
    """The lines of a job's times, as Slurm's: run time and limit; submit and eligible time
    (a begin time, ``sbatch --begin``, makes it later); start, end and deadline (a job that
    has not started and waits for its begin time shows that as its start, as Slurm's)."""
    start, end, limit = job.get("start_time"), job.get("end_time"), job.get("time_limit_s")
    run = 0 if start is None else max(0, int((end if end is not None else now) - start))
    if end is None and start is not None and limit is not None:
        end = start + limit  # (when its time limit runs out, as Slurm's)
    deadline, submit, begin = job.get("deadline"), job.get("submit_time"), job.get("begin_time")
    eligible = submit if begin is None or submit is None else max(submit, begin)
    shown_start = start
    if start is None and begin is not None and begin > now and job.get("end_time") is None:
        shown_start = begin  # (not before its begin time)
    return [
        [
            ("RunTime", slurm_hms(run)),
            ("TimeLimit", "UNLIMITED" if limit is None else slurm_duration(limit)),
        ],
        [("SubmitTime", stamp(submit)), ("EligibleTime", stamp(eligible))],
        [
            ("StartTime", stamp(shown_start)),
            ("EndTime", stamp(end)),
            ("Deadline", "N/A" if deadline is None else stamp(deadline)),
        ],
    ]


def _phase(view: Mapping[str, Any]) -> JobPhase | None:
    try:
        return JobPhase(str(view.get("phase")))
    except ValueError:
        return None


def waits_for_dependencies(job: Job) -> bool:
    """Whether ``job`` has dependencies and has not started (nor been queued to start: a
    queued job's dependencies are all met)."""
    return (
        bool(job.get("dependencies"))
        and job.get("start_time") is None
        and (job.get("phase") not in (JobPhase.QUEUED, JobPhase.RUNNING))
    )


def dependency_targets(job: Job) -> list[str]:
    """The jobs (or arrays) whose views :func:`dependency_text` needs for ``job``: those its
    dependencies name, while it waits for them; none otherwise."""
    if not waits_for_dependencies(job):
        return []
    named = (str(d.get("job_id") or "") for d in job["dependencies"] if isinstance(d, dict))
    return list(dict.fromkeys(n for n in named if n))


def _verdict(kind: DependencyKind, views: Sequence[Mapping[str, Any]]) -> str:
    """``met``, ``failed`` (never to be met) or ``unfulfilled``: ``kind`` on the jobs
    ``views`` (one job's, or an array's members; none: not known)."""
    phases = [_phase(v) for v in views]
    if not phases:
        return "unfulfilled"
    if kind is DependencyKind.AFTER_NOT_OK:  # (on an array: once all ended, one failed)
        if not all(p is not None and p.terminal for p in phases):
            return "unfulfilled"
        return "met" if any(p is not JobPhase.COMPLETED for p in phases) else "failed"
    if any(p is not None and kind.broken(p) for p in phases):
        return "failed"
    return "met" if all(p is not None and kind.met(p) for p in phases) else "unfulfilled"


def dependency_text(job: Job, others: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """``job``'s ``Dependency`` as Slurm writes it (``afterok:12(unfulfilled),afterany:40_*
    (unfulfilled)``; ``(null)`` when none is left): ``others`` holds the views of the jobs
    its dependencies name (an array's id: its members; left out: not known)."""
    if not waits_for_dependencies(job):
        return NULL
    index = str(job.get("id", "")).rpartition("_")[2] if job.get("array_parent") else ""
    left: list[str] = []
    for dep in job["dependencies"]:
        if not isinstance(dep, dict):
            continue
        try:
            kind = DependencyKind(str(dep.get("kind")))
        except ValueError:
            continue
        if kind is DependencyKind.SINGLETON:
            if job.get("phase") == JobPhase.PENDING:
                left.append("singleton(unfulfilled)")
            continue
        target = str(dep.get("job_id") or "")
        views = others.get(target, ())
        array = any(v.get("array_parent") == target and v.get("id") != target for v in views)
        if array and kind is DependencyKind.AFTER_CORR:  # (its partner, the same index)
            partner = [v for v in views if v.get("id") == f"{target}_{index}"]
            views = partner or views
            kind = DependencyKind.AFTER_OK
        state = _verdict(kind, views)
        if state != "met":
            left.append(f"{dep.get('kind')}:{target}{'_*' if array else ''}({state})")
    return ",".join(left) or NULL


def _batch(job: Job) -> bool:
    """Whether a batch script runs the job (salloc's allocation: not one, as Slurm's)."""
    return bool(job.get("batch")) and not job.get("allocation")


def _run_lines(job: Job) -> Record:
    """``Command``, ``WorkDir`` (and ``Comment``) and a batch job's ``StdErr``, ``StdIn`` and
    ``StdOut``, in Slurm's order; what the view lacks (an older controller's) left out."""
    lines: Record = []
    if "command" in job:
        lines.append([("Command", str(job.get("command") or NULL))])
    if "workdir" in job:
        lines.append([("WorkDir", str(job.get("workdir") or NULL))])
    if job.get("comment"):
        lines.append([("Comment", str(job["comment"]))])
    if _batch(job) and "output_file" in job:
        out = str(job.get("output_file") or NULL)
        lines.append([("StdErr", str(job.get("error_file") or out))])
        lines.append([("StdIn", STDIN)])
        lines.append([("StdOut", out)])
    return lines


def job_record(
    job: Job, now: float, others: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
) -> Record:
    """One job as ``scontrol show job`` writes it; ``others``: the views of the jobs its
    dependencies name (:func:`dependency_text`)."""
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
    state = [("JobState", slurm_state(job)), ("Reason", reason_word(job))]
    if "dependencies" in job:
        state.append(("Dependency", dependency_text(job, others or {})))
    licenses = job.get("licenses")
    return [
        first,
        [("UserId", _user(str(job.get("user") or "")))],
        [
            ("Priority", str(job.get("priority", 0))),
            ("Account", str(job.get("tenant") or NULL)),
            ("QOS", str(job.get("qos") or NULL)),
        ],
        state,
        [
            *([] if restarts is None else [("Restarts", str(restarts))]),
            ("BatchFlag", "1" if _batch(job) else "0"),
            ("ExitCode", exit_code(job)),
        ],
        *_times(job, now),
        [("Partition", str(job.get("queue") or NULL))],
        [("NodeList", compress_hostlist(held) if held else NULL)],
        counts,
        [("TRES", _tres(job, nodes))],
        [("Licenses", ",".join(f"{n}:{k}" for n, k in sorted(licenses.items())))]
        if licenses
        else [],
        *_run_lines(job),
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
        [
            ("CPUAlloc", str(node.cpus_alloc)),
            ("CPUTot", str(node.cpus)),
            ("CPULoad", cpu_load_text(node)),
        ],
        [("AvailableFeatures", ",".join(node.features) or NULL)],
        [("Gres", node.gres)],
        [("NodeAddr", node.address or node.name), ("NodeHostName", node.hostname)],
        [
            ("RealMemory", str(node.memory_mb)),
            ("FreeMem", free_mem_text(node)),
            ("TmpDisk", str(node.tmp_disk_mb)),
        ],
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
