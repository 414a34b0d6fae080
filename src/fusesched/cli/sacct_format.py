"""What ``fusesched sacct`` prints, as Slurm's sacct: its job states (``COMPLETED``,
``OUT_OF_MEMORY``, …) and their codes for ``-s``, exit codes as ``code:signal``, the values
its fields show, ``-o`` read (``JobID,JobName%30,State``; the fields themselves are in
:mod:`fusesched.cli.sacct_fields`), and its table, ``-p``/``-P`` and JSON outputs.

Pure functions of the job views (``GET /v1/jobs``), with the efficiency views (``GET
/v1/jobs/{id}/efficiency``) where a field needs what a job used (MaxRSS, TotalCPU, ReqMem,
NTasks, AllocTRES's memory); bad input raises ``ValueError`` with a message that says what is
known. A job shows its latest run; its steps' rows (:mod:`fusesched.cli.sacct_steps`) are
job-like views with a ``step``, where the fields of the job alone (User, Partition, QOS,
Timelimit, Priority, Reason, ReqMem, Restarts, WorkDir, …) are blank, as in Slurm's.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from fusesched.cli.sacct_usage import PER_TASK, Units, convert, slurm_size
from fusesched.cli.squeue_format import _CONTROLS, GPU, StateMatch
from fusesched.hostlist import compress_hostlist
from fusesched.model.phases import node_failed, oom_killed

if TYPE_CHECKING:
    from fusesched.cli.sacct_fields import Field

Job = dict[str, Any]
#: A job's efficiency view (``{}``: not asked for, or unknown).
Usage = dict[str, Any]

#: sacct's states fusesched's jobs end in or pass through: (code, what to ask the controller
#: for). The jobs the controller answers are then kept by :func:`sacct_state`.
SACCT_STATES: Final[dict[str, tuple[str, StateMatch]]] = {
    "PENDING": ("PD", StateMatch(states=("Pending",))),
    "RUNNING": ("R", StateMatch(states=("Running",))),
    "COMPLETED": ("CD", StateMatch(states=("Completed",))),
    "FAILED": ("F", StateMatch(phases=("failed",))),
    "OUT_OF_MEMORY": ("OOM", StateMatch(phases=("failed",))),
    "NODE_FAIL": ("NF", StateMatch(phases=("failed",))),
    "CANCELLED": ("CA", StateMatch(phases=("cancelled",))),
    "DEADLINE": ("DL", StateMatch(phases=("cancelled",))),
    "TIMEOUT": ("TO", StateMatch(phases=("timeout",))),
    "PREEMPTED": ("PR", StateMatch(phases=("preempted", "cancelled"))),
}
#: sacct's states no fusesched job is shown in (a requeued job shows its latest run, as
#: sacct without --duplicates): asked for, they match no job.
NEVER_STATES: Final[dict[str, str]] = {
    "BOOT_FAIL": "BF",
    "COMPLETING": "CG",
    "REQUEUED": "RQ",
    "RESIZING": "RS",
    "REVOKED": "RV",
    "SUSPENDED": "S",
}
_BY_CODE: Final = {code: name for name, (code, _) in SACCT_STATES.items()}
_NEVER: Final = frozenset({*NEVER_STATES, *NEVER_STATES.values()})

#: What the reason of a job removed at its deadline says (the core's ``deadlines.REASON``)
#: and of a preempted one not requeued (``requeue.NOT_REQUEUED``). One whose node was lost,
#: or ended by the kernel's OOM killer, is told by its reason
#: (:func:`fusesched.model.phases.node_failed`, :func:`~fusesched.model.phases.oom_killed`).
DEADLINE_MARK: Final = "DeadLine"
NOT_REQUEUED_MARK: Final = "not requeued"


def known_states() -> str:
    """The names ``-s`` takes, for an error message."""
    return ", ".join(f"{code}/{name}" for name, (code, _) in SACCT_STATES.items())


def parse_states(given: Iterable[str]) -> set[str]:
    """``-s CD,F`` (each item may hold a comma list; any case) as sacct's long names (none
    when only states fusesched never shows are named); a ``ValueError`` for an unknown one."""
    names: set[str] = set()
    for item in given:
        for raw in item.split(","):
            word = raw.strip().upper()
            if word in SACCT_STATES:
                names.add(word)
            elif word in _BY_CODE:
                names.add(_BY_CODE[word])
            elif word not in _NEVER:
                shown = raw.strip() or item
                raise ValueError(f"unknown job state {shown!r}; known: {known_states()}")
    return names


def state_query(names: Iterable[str]) -> StateMatch:
    """The states and phases to ask the controller for, to find jobs in any of ``names``."""
    states: set[str] = set()
    phases: set[str] = set()
    for name in names:
        match = SACCT_STATES[name][1]
        states.update(match.states)
        phases.update(match.phases)
    return StateMatch(tuple(sorted(states)), tuple(sorted(phases)))


def sacct_state(job: Job) -> str:
    """The job's state as sacct prints it; a failure or cancellation told apart by its
    reason (out of memory, a lost node, its deadline, preempted and not requeued)."""
    phase, reason = job.get("phase"), str(job.get("reason") or "")
    if phase == "failed":
        if oom_killed(reason):
            return "OUT_OF_MEMORY"
        return "NODE_FAIL" if node_failed(reason) else "FAILED"
    if phase == "cancelled":
        if reason.startswith(DEADLINE_MARK):
            return "DEADLINE"
        return "PREEMPTED" if NOT_REQUEUED_MARK in reason else "CANCELLED"
    if phase in ("timeout", "preempted"):
        return str(phase).upper()
    return str(job.get("state") or "").upper()


#: Job states the controller ends a job in (not its tasks' own exit): sacct's job row shows
#: ``0:0`` for them whatever the tasks' signal (``TIMEOUT 0:0``, its ``.batch`` ``0:15``).
ENDED_BY_CONTROLLER: Final = frozenset({"CANCELLED", "TIMEOUT", "DEADLINE", "PREEMPTED"})
#: What Slurm's sacct shows for a job (and step) killed for memory: its pseudo-signal
#: ``SIG_OOM`` (253) less the signal flag (128), in place of the SIGKILL that killed it.
OOM_EXIT: Final = "0:125"
#: What Slurm's sacct shows for a job a node failure ended (``NODE_FAIL``): slurmctld sets
#: its exit code to 1 when it kills the job on the failed node, a wait status read as signal 1
#: (Slurm 22.05 left it 0: ``0:0``).
NODE_FAIL_EXIT: Final = "0:1"


def exit_code(job: Job) -> str:
    """``code:signal``: ``3:0`` for an exit status, ``0:15`` for a signal (fusesched keeps a
    signal as a negative code; -1, a task the controller ended, has neither). A job's own
    row (not a step's) in a state of :data:`ENDED_BY_CONTROLLER` is ``0:0``, as Slurm's: the
    signal that stopped it shows on its steps' rows. A row ``OUT_OF_MEMORY`` is
    :data:`OOM_EXIT`, a job's own row ``NODE_FAIL`` :data:`NODE_FAIL_EXIT`, as Slurm's."""
    state = sacct_state(job)
    if state == "OUT_OF_MEMORY":
        return OOM_EXIT
    if state == "NODE_FAIL" and job.get("step") is None:
        return NODE_FAIL_EXIT
    code = job.get("exit_code")
    if code is None or code == -1:
        return "0:0"
    if job.get("step") is None and state in ENDED_BY_CONTROLLER:
        return "0:0"
    return f"0:{-code}" if code < 0 else f"{code}:0"


# ---------------------------------------------------------------------- values


def duration(seconds: float) -> str:
    """sacct's ``[D-]HH:MM:SS`` (Elapsed, Timelimit, CPUTime)."""
    days, rest = divmod(max(0, int(seconds)), 86400)
    hours, rest = divmod(rest, 3600)
    clock = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def cpu_duration(seconds: float) -> str:
    """sacct's CPU time: ``MM:SS.mmm`` under an hour (its milliseconds cut, not rounded),
    else, or with no milliseconds, ``[D-]HH:MM:SS``."""
    whole, micro = divmod(round(max(0.0, seconds) * 1e6), 10**6)
    if whole >= 3600 or micro < 1000:
        return duration(whole)
    return f"{whole // 60:02d}:{whole % 60:02d}.{micro // 1000:03d}"


def _stamp(t: float | None) -> str:
    return "Unknown" if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _elapsed_s(job: Job, now: float) -> int:
    start, end = job.get("start_time"), job.get("end_time")
    return 0 if start is None else max(0, int((end if end is not None else now) - start))


def _cpus(job: Job) -> float:
    """The cores it holds (0: it never started, as sacct's AllocCPUS)."""
    return float(job.get("cpus") or 0) if job.get("start_time") is not None else 0.0


def _number(value: float) -> str:
    """Whole numbers as integers, parts to the thousandth (``0.5``)."""
    return f"{value:.3f}".rstrip("0").rstrip(".") or "0"


def _memory(n: int | None) -> str:
    """Bytes asked for in Slurm's units from mebibytes (``4G``, ``500M``, ``1.50G``), as
    sacct's ReqMem and the ``mem=`` of its TRES."""
    return "" if n is None else slurm_size(math.ceil(n / 2**20), unit=2)


def _node_list(job: dict[str, Any]) -> str:
    """Slurm's short host list of the job's nodes (``n[1-3]``), or its "None assigned"."""
    return compress_hostlist(job.get("nodes") or []) or "None assigned"


def _alloc_tres(job: Job, usage: Usage) -> str:
    """``cpu=2,mem=4G,node=1,gres/gpu=1``: what a started job holds (blank before)."""
    if job.get("start_time") is None:
        return ""
    return tres(job, usage, _cpus(job), len(job.get("nodes") or []) or job.get("min_nodes") or 1)


def tres(job: Job, usage: Usage, cpus: float, nodes: int) -> str:
    """``cpu=…,mem=…,node=…,gres/gpu=…`` of ``job`` with ``cpus`` and ``nodes`` (AllocTRES,
    ReqTRES): its memory and accelerators as it asks for them."""
    parts = [f"cpu={_number(cpus)}"]
    if usage.get("memory_bytes"):
        parts.append(f"mem={_memory(usage['memory_bytes'])}")
    parts.append(f"node={nodes}")
    kinds = job.get("accelerators") or ({GPU: job["gpus"]} if job.get("gpus") else {})
    parts.extend(f"gres/{'gpu' if k == GPU else k}={n}" for k, n in kinds.items() if n)
    return ",".join(parts)


def _eligible(job: Job) -> str:
    """When it could start: its submit time, Unknown while it waits for dependencies or its
    begin time (phase pending) or is held."""
    return "Unknown" if job.get("phase") in ("pending", "held") else _stamp(job.get("submit_time"))


def _timelimit(job: Job) -> str:
    limit = job.get("time_limit_s")
    return "UNLIMITED" if limit is None else duration(math.ceil(limit))


def _cpu_time_s(job: Job, now: float) -> int:
    return math.ceil(_elapsed_s(job, now) * _cpus(job))


def _restarts(job: Job) -> str:
    """How many times it was requeued or restarted (blank: not known)."""
    count = job.get("restarts")
    return "" if count is None else str(count)


def _total_cpu(usage: Usage) -> str:
    used = usage.get("cpu_seconds")
    return "" if used is None else cpu_duration(used)


#: sacct's default fields.
DEFAULT_FORMAT: Final = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
#: The widest a field may be (``%1000``).
MAX_WIDTH: Final = 1000


# ---------------------------------------------------------------------- formats


@dataclass(frozen=True)
class Column:
    """A field as ``-o`` names it, with its width (negative: left-justified)."""

    field: Field
    width: int


_ITEM: Final = re.compile(r"(?P<name>[A-Za-z]+)(?:%(?P<width>-?[0-9]{1,4}))?")
#: What ``-o`` takes for every field, as Slurm's sacct: ``ALL`` or the start of it.
_ALL: Final = frozenset({"a", "al", "all"})


def parse_format(text: str) -> list[Column]:
    """``-o JobID,JobName%30,State%-12`` (any case): the fields with their widths (``%N``:
    right-justified in N columns, ``%-N`` left-justified); a ``ValueError`` that lists the
    known fields for an unknown one. As Slurm's sacct, a name may be the start of one (the
    first in ``-e``'s order: ``jobn`` is JobName, ``tresusageinmaxn`` TRESUsageInMaxNode),
    ``ALL`` (or ``a``, ``al``) is every field, and blank items are skipped."""
    from fusesched.cli.sacct_fields import FIELDS  # (its values are this module's)

    columns: list[Column] = []
    items = [raw.strip() for raw in text.split(",")]
    if not any(items):
        raise ValueError(f"no field in --format {text!r}")
    for raw in filter(None, items):
        item = _ITEM.fullmatch(raw)
        found = _fields_named(item["name"]) if item else []
        if item is None or not found:
            name = item["name"] if item else raw
            known = ",".join(f.header for f in FIELDS.values())
            raise ValueError(f"unknown field {name!r} in --format {text!r}; known: {known}")
        for field in found:
            width = field.width if item["width"] is None else int(item["width"])
            if not 1 <= abs(width) <= MAX_WIDTH:
                raise ValueError(f"bad width in {raw!r}: 1 to {MAX_WIDTH} (-N: left-justified)")
            columns.append(Column(field, width))
    return columns


def _fields_named(name: str) -> list[Field]:
    """The field ``name`` names (its name or the start of one), or every field for ``ALL``."""
    from fusesched.cli.sacct_fields import FIELDS, ordered

    word = name.lower()
    if word in _ALL:
        return ordered()
    if word in FIELDS:
        return [FIELDS[word]]
    return [f for f in ordered() if f.header.lower().startswith(word)][:1]


def needs_usage(columns: Sequence[Column]) -> bool:
    """Whether any of ``columns`` needs the jobs' efficiency views."""
    return any(c.field.usage for c in columns)


def needs_tasks(columns: Sequence[Column]) -> bool:
    """Whether any of ``columns`` needs each task's figures of a step (the jobs' tasks)."""
    return any(c.field.header.lower() in PER_TASK for c in columns)


def needs_detail(columns: Sequence[Column]) -> bool:
    """Whether any of ``columns`` needs the jobs' detailed views."""
    return any(c.field.detail for c in columns)


def values(
    columns: Sequence[Column], job: Job, usage: Usage, now: float, units: Units | None = None
) -> list[str]:
    """The values in ``columns`` of a job, or of a step's job-like view (``step`` set: the
    fields of the job alone are blank); control characters as ``?``: one line a row.
    ``units`` (``--units``, ``--noconvert``): the sizes in them, not in sacct's own choice."""
    step = job.get("step") is not None
    return [
        "" if step and not c.field.steps else _value(c.field, job, usage, now, units)
        for c in columns
    ]


def _value(field: Field, job: Job, usage: Usage, now: float, units: Units | None) -> str:
    if units is None or field.size is None:
        return field.value(job, usage, now).translate(_CONTROLS)
    amount = field.size(job, usage, now)
    return "" if amount is None else convert(amount, field.base, units, field.kilo)


def _cell(text: str, width: int) -> str:
    """``text`` in ``abs(width)`` columns; a longer one cut, its last kept column ``+``."""
    size = abs(width)
    if len(text) > size:
        text = text[: size - 1] + "+"
    return text.ljust(size) if width < 0 else text.rjust(size)


def table(columns: Sequence[Column], rows: Iterable[list[str]], header: bool = True) -> list[str]:
    """sacct's table: the headers and a line of dashes (unless ``header`` is off), then a
    line a job; trailing blanks dropped. A value too long is cut with a ``+``, a header plainly."""
    lines = []
    if header:
        cut = [c.field.header[: abs(c.width)] for c in columns]  # (a header: no "+")
        lines.append(" ".join(_cell(h, c.width) for h, c in zip(cut, columns, strict=True)))
        lines.append(" ".join("-" * abs(c.width) for c in columns))
    lines.extend(
        " ".join(_cell(v, c.width) for v, c in zip(row, columns, strict=True)) for row in rows
    )
    return [line.rstrip() for line in lines]


def parsable(
    columns: Sequence[Column],
    rows: Iterable[list[str]],
    header: bool = True,
    trailing: bool = False,
    delimiter: str = "|",
) -> list[str]:
    """``-P``: the values separated by ``delimiter`` (``|``; ``--delimiter``, which may be
    empty: the values run together, as Slurm's; ``-p``, ``trailing``: one after the last
    too), never cut, a delimiter inside a value as ``?``; the header line first unless
    ``header`` is off."""
    end = delimiter if trailing else ""

    def shown(value: str) -> str:
        return value.replace(delimiter, "?") if delimiter else value

    lines = [delimiter.join(c.field.header for c in columns) + end] if header else []
    lines.extend(delimiter.join(shown(v) for v in row) + end for row in rows)
    return lines


def records(columns: Sequence[Column], rows: Iterable[list[str]]) -> list[dict[str, str]]:
    """``--json``: an object a job, the fields' names as keys."""
    return [{c.field.header: v for v, c in zip(row, columns, strict=True)} for row in rows]
