"""What ``fusesched jobs`` takes from ``squeue``: Slurm's job state names and codes (``-t
PD,R``) mapped onto fusesched's states and phases, and the output formats ``-o "%.10i %T"``
and ``-O "JobID,Name:20"`` that scripts parse.

Pure functions of the job views (``GET /v1/jobs``) and the format text; bad input raises
:class:`FormatError` (or ``ValueError`` for a state) with a message that says what is known.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from fusesched.model.phases import node_failed, oom_killed

Job = dict[str, Any]
GPU: Final = "nvidia.com/gpu"


class StateMatch(NamedTuple):
    """What a Slurm state name asks for: jobs in any of ``states`` (fusesched's coarse
    states) or in any of ``phases`` (its finer phases), or, with ``completing``, those the
    controller shows completing (``GET /v1/jobs?completing=true``). Of the jobs in phase
    ``failed``, which Slurm tells apart, ``failed`` names those kept (``FAILED``,
    ``NODE_FAIL``: :func:`matches`), unless ``states`` holds ``Failed`` (all of them)."""

    states: tuple[str, ...] = ()
    phases: tuple[str, ...] = ()
    completing: bool = False
    failed: tuple[str, ...] = ()


#: Slurm's job states that fusesched has, by long name: (short code, what they match).
SLURM_STATES: Final[dict[str, tuple[str, StateMatch]]] = {
    "PENDING": ("PD", StateMatch(states=("Pending",))),
    "RUNNING": ("R", StateMatch(states=("Running",))),
    "COMPLETED": ("CD", StateMatch(states=("Completed",))),
    "FAILED": ("F", StateMatch(phases=("failed",), failed=("FAILED",))),
    "NODE_FAIL": ("NF", StateMatch(phases=("failed",), failed=("NODE_FAIL",))),
    "OUT_OF_MEMORY": ("OOM", StateMatch(phases=("failed",), failed=("OUT_OF_MEMORY",))),
    "CANCELLED": ("CA", StateMatch(states=("Cancelled",))),
    "TIMEOUT": ("TO", StateMatch(phases=("timeout",))),
    "PREEMPTED": ("PR", StateMatch(phases=("preempted",))),
    # (a run still holds its booking where its tasks are being killed; its state is its end's)
    "COMPLETING": ("CG", StateMatch(completing=True)),
}
#: Slurm's job states that a fusesched job is never in: asked for, they match no job (so a
#: script's ``-t PD,R,CG`` works).
NEVER_STATES: Final[dict[str, str]] = {
    "BOOT_FAIL": "BF",
    "CONFIGURING": "CF",
    "DEADLINE": "DL",
    "REQUEUED": "RQ",
    "REQUEUE_FED": "RF",
    "REQUEUE_HOLD": "RH",
    "RESIZING": "RS",
    "RESV_DEL_HOLD": "RD",
    "REVOKED": "RV",
    "SIGNALING": "SI",
    "SPECIAL_EXIT": "SE",
    "STAGE_OUT": "SO",
    "STOPPED": "ST",
    "SUSPENDED": "S",
}
_NEVER: Final = frozenset({*NEVER_STATES, *NEVER_STATES.values()})
#: Every state (``-t all``).
ALL_STATES: Final = StateMatch(
    states=("Pending", "Running", "Completed", "Failed", "Cancelled"), completing=True
)
_BY_CODE: Final = {code: match for code, match in SLURM_STATES.values()}


def known_states() -> str:
    """The state names ``-t`` takes, for an error message."""
    return ", ".join(f"{code}/{name}" for name, (code, _) in SLURM_STATES.items()) + ", all"


def parse_states(given: Iterable[str]) -> StateMatch:
    """``-t PD,R`` (each item may hold a comma list; case does not matter; fusesched's own
    names such as ``Pending`` are Slurm's too) as the states and phases to ask for (none at
    all when only states fusesched never has are named: no job matches); a ``ValueError``
    listing the known names for any other."""
    states: set[str] = set()
    phases: set[str] = set()
    failed: set[str] = set()
    completing = False
    for item in given:
        for raw in item.split(","):
            word = raw.strip().upper()
            if not word:
                raise ValueError(f"an empty job state in {item!r}; known: {known_states()}")
            if word == "ALL":
                match = ALL_STATES
            elif word in SLURM_STATES:
                match = SLURM_STATES[word][1]
            elif word in _BY_CODE:
                match = _BY_CODE[word]
            elif word in _NEVER:
                continue  # (matches no job)
            else:
                raise ValueError(f"unknown job state {raw.strip()!r}; known: {known_states()}")
            states.update(match.states)
            phases.update(match.phases)
            failed.update(match.failed)
            completing = completing or match.completing
    found = (tuple(sorted(states)), tuple(sorted(phases - {""})))
    return StateMatch(*found, completing, tuple(sorted(failed)))


def matches(match: StateMatch, job: Job) -> bool:
    """Whether ``-t`` lists a job the controller answered for ``match``. One shown
    ``COMPLETING`` only for ``CG`` (or ``all``), as Slurm's squeue matches a job whose state
    has that flag by the flag alone: ``-t CA`` lists a cancelled job once its tasks are gone,
    not while it is shown ``CG``. And with ``CG`` alone only such a job: an older controller
    ignores ``completing=true`` and answers every job. A failed job only for the one of
    ``FAILED``, ``NODE_FAIL`` and ``OUT_OF_MEMORY`` it is shown in (or ``all``): all are
    phase ``failed``."""
    if job.get("completing"):
        return match.completing
    if job.get("phase") == "failed" and "Failed" not in match.states:
        return slurm_state(job) in match.failed
    return bool(match.states or match.phases)


def slurm_state(job: Job) -> str:
    """The job's state as Slurm names it (``PENDING``, ``TIMEOUT``, ``NODE_FAIL`` for one
    failed by a lost node, …); ``COMPLETING`` while the controller shows it so, whatever
    state it ended in (as Slurm's flag)."""
    if job.get("completing"):
        return "COMPLETING"
    phase, state = job.get("phase"), job.get("state")
    if phase == "failed" and node_failed(str(job.get("reason") or "")):
        return "NODE_FAIL"
    if phase == "failed" and oom_killed(str(job.get("reason") or "")):
        return "OUT_OF_MEMORY"  # (the kernel's OOM killer ended it, as sacct shows it)
    if phase == "timeout":
        return "TIMEOUT"
    if phase == "preempted":
        return "PREEMPTED"
    return str(state or "").upper()


def state_code(job: Job) -> str:
    """The job's state as ``squeue %t`` writes it (``PD``, ``R``, ``TO``, …)."""
    long = slurm_state(job)
    return SLURM_STATES[long][0] if long in SLURM_STATES else long


# ---------------------------------------------------------------------- values


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


def _end(job: Job) -> str:
    """The end time; a running job's is when its time limit runs out (as squeue)."""
    if job.get("end_time") is not None:
        return _stamp(job["end_time"])
    limit, start = job.get("time_limit_s"), job.get("start_time")
    return _stamp(start + limit) if start is not None and limit is not None else "N/A"


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
    "a": Field("ACCOUNT", lambda j: str(j.get("tenant") or "")),
    "t": Field("ST", state_code),
    "T": Field("STATE", slurm_state),
    "P": Field("PARTITION", lambda j: str(j.get("queue") or "")),
    "q": Field("QOS", lambda j: str(j.get("qos") or "N/A")),
    "M": Field("TIME", _used),
    "l": Field("TIME_LIMIT", _limit),
    "D": Field("NODES", _node_count),
    "C": Field("CPUS", _cpus),
    "b": Field("TRES_PER_NODE", _gres),
    "r": Field("REASON", _reason),
    "R": Field("NODELIST(REASON)", _reason_or_nodes),
    "N": Field("NODELIST", _nodes),
    "V": Field("SUBMIT_TIME", lambda j: _stamp(j.get("submit_time"))),
    "S": Field("START_TIME", lambda j: _stamp(j.get("start_time"))),
    "e": Field("END_TIME", _end),
    "p": Field("PRIORITY", lambda j: str(j.get("priority", 0))),
    "Q": Field("PRIORITY", lambda j: str(j.get("priority", 0))),
}

#: ``-O`` fields by squeue's long name (lower case), as the letters above.
LONG_FIELDS: Final[dict[str, str]] = {
    "jobid": "i",
    "arrayjobid": "F",
    "arraytaskid": "K",
    "name": "j",
    "username": "u",
    "account": "a",
    "statecompact": "t",
    "state": "T",
    "partition": "P",
    "qos": "q",
    "timeused": "M",
    "timelimit": "l",
    "numnodes": "D",
    "numcpus": "C",
    "tres-per-node": "b",
    "gres": "b",
    "reason": "r",
    "reasonlist": "R",
    "nodelist": "N",
    "submittime": "V",
    "starttime": "S",
    "endtime": "e",
    "priority": "p",
    "prioritylong": "Q",
}
#: ``-O``'s width when a field names none (as squeue).
LONG_WIDTH: Final = 20
#: The widest a field may be (``%1000j``), and the most the widths of a line add up to.
MAX_WIDTH: Final = 1000
MAX_LINE: Final = 20_000


# ---------------------------------------------------------------------- formats


class FormatError(ValueError):
    """A format that cannot be used: the message says where and what is known."""


@dataclass(frozen=True)
class Piece:
    """A run of literal text (``field`` None) or one field with its width and side."""

    text: str = ""
    field: Field | None = None
    width: int | None = None
    right: bool = False  # squeue's "%.10i": right-justified
    gap: bool = False  # -O: the value is cut to leave a blank before the next column

    def render(self, value: str) -> str:
        if self.field is None:
            return self.text
        if self.width is None:
            return value
        room = self.width - 1 if self.gap else self.width
        cut = value[: max(room, 0)]
        padded = cut.rjust(room) if self.right else cut.ljust(room)
        return padded + " " if self.gap else padded


_SPEC: Final = re.compile(r"%(?P<side>[.-]?)(?P<width>[0-9]*)(?P<letter>.?)", re.DOTALL)


def parse_format(text: str, fields: Mapping[str, Field] = FIELDS) -> list[Piece]:
    """squeue's ``-o`` text: ``%[.|-][WIDTH]LETTER`` fields (``.``: right-justified; a width
    pads the value and cuts a longer one), ``%%`` a percent sign, anything else as written.
    ``fields``: the letters known (sinfo's are its own: :mod:`fusesched.cli.sinfo_format`)."""
    pieces: list[Piece] = []
    at = 0
    while (found := text.find("%", at)) >= 0:
        if found > at:
            pieces.append(Piece(text=text[at:found]))
        spec = _SPEC.match(text, found)
        assert spec is not None  # (every part of it may be empty)
        letter = spec["letter"]
        if letter == "%" and not spec["side"] and not spec["width"]:
            pieces.append(Piece(text="%"))
        elif not letter:
            raise FormatError(f"format {text!r} ends inside a field: give a letter after '%'")
        elif letter not in fields:
            raise FormatError(
                f"unknown format field %{letter} in {text!r}; known: "
                + " ".join(f"%{k}" for k in fields)
                + " (and %% for a percent sign)"
            )
        else:
            width = _width(spec["width"], f"%{letter}") or None  # (%0i: as %i, as squeue)
            pieces.append(Piece(field=fields[letter], width=width, right=spec["side"] == "."))
        at = spec.end()
    if at < len(text):
        pieces.append(Piece(text=text[at:]))
    return _bounded(pieces, text)


def parse_long_format(
    text: str,
    long_fields: Mapping[str, str] = LONG_FIELDS,
    fields: Mapping[str, Field] = FIELDS,
    example: str = "JobID,Name",
) -> list[Piece]:
    """squeue's ``-O``: comma-separated long names, each with an optional ``:WIDTH`` (``.``
    before it: right-justified), 20 wide by default; a name's value is cut to leave a blank.
    ``long_fields``: the names known (lower case), as letters of ``fields`` (sinfo's are
    its own: :mod:`fusesched.cli.sinfo_long`)."""
    pieces: list[Piece] = []
    if not text.strip():
        raise FormatError(f"an empty --Format shows nothing: name fields, such as {example}")
    for raw in text.split(","):
        name, _, size = raw.strip().partition(":")
        letter = long_fields.get(name.strip().lower())
        if letter is None:
            raise FormatError(
                f"unknown field {name.strip()!r} in {text!r}; known: "
                + ",".join(sorted(long_fields))
            )
        right = size.startswith(".")
        digits = size.removeprefix(".")
        if digits and not (digits.isascii() and digits.isdigit() and digits.strip("0")):
            raise FormatError(f"bad width {size!r} for {name!r}: a number from 1 to {MAX_WIDTH}")
        width = _width(digits, name.strip()) or LONG_WIDTH
        pieces.append(Piece(field=fields[letter], width=width, right=right, gap=True))
    return _bounded(pieces, text)


def _width(digits: str, what: str) -> int:
    """A field's width as written (ASCII digits; ``""``: 0), at most :data:`MAX_WIDTH`."""
    value = digits.lstrip("0")  # (no int() of a 5000-digit string)
    if len(value) > len(str(MAX_WIDTH)) or (value and int(value) > MAX_WIDTH):
        shown = value if len(value) <= 20 else f"{value[:20]}… ({len(value)} digits)"
        raise FormatError(f"width {shown} of {what} is too wide (at most {MAX_WIDTH})")
    return int(value) if value else 0


def _bounded(pieces: list[Piece], text: str) -> list[Piece]:
    """``pieces`` when they print something and their widths add up to at most
    :data:`MAX_LINE` (each line is built in memory, a thousand of them at once)."""
    if not pieces:
        raise FormatError("an empty --format shows nothing: give fields, such as '%i %j'")
    wide = sum(p.width or 0 for p in pieces)
    if wide > MAX_LINE:
        raise FormatError(
            f"the fields of {text[:60]!r}{'…' if len(text) > 60 else ''} are {wide} characters "
            f"wide in all; at most {MAX_LINE}"
        )
    return pieces


def render(pieces: Sequence[Piece], jobs: Iterable[Job], header: bool = True) -> list[str]:
    """The lines squeue would print: the header (unless ``header`` is off), then a line a
    job. A line's trailing blanks are dropped, as scripts expect. A control character in a
    value (a job name's newline or terminal escape) is written ``?``: one line a job, and
    nothing another user named reaches the terminal as a command."""
    lines = []
    if header:
        lines.append("".join(p.render(p.field.header if p.field else "") for p in pieces))
    for job in jobs:
        lines.append(
            "".join(
                p.render(p.field.value(job).translate(_CONTROLS) if p.field else "") for p in pieces
            )
        )
    return [line.rstrip() for line in lines]


#: C0 and C1 control characters and DEL, each as ``?``.
_CONTROLS: Final = {c: "?" for c in (*range(0x20), *range(0x7F, 0xA0))}
