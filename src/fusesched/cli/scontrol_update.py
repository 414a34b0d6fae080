"""``fusesched scontrol update``, ``create reservation`` and ``delete``: Slurm's ``Key=Value``
words (keys in any case, as Slurm's) read into fusesched's calls, with no I/O
(:func:`pairs`, :func:`target`, :func:`job_update`, :func:`node_update`,
:func:`new_reservation`, :func:`reservation_change`); :class:`ScontrolError` says what is
wrong or not supported.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from fusesched.hostlist import expand_hostlist
from fusesched.submit.syntax import parse_slurm_time


class ScontrolError(Exception):
    """A command scontrol cannot do here: the message says why (exit status 1)."""


#: What ``update`` can change of a job, of a node and of a reservation (lower case).
JOB_KEYS: Final = (
    "timelimit",
    "priority",
    "qos",
    "nice",
    "name",
    "jobname",
    "comment",
    "partition",
    "dependency",
    "starttime",
    "begintime",
)
#: A job's keys Slurm's update takes that the controller's update route does not (it
#: changes the keys of :data:`JOB_KEYS` alone): refused, saying so.
JOB_KEYS_UNSERVED: Final = (
    "numcpus",
    "numnodes",
    "numtasks",
    "account",
    "features",
    "gres",
    "tres",
    "minmemorynode",
    "minmemorycpu",
    "reqnodelist",
    "excnodelist",
    "reservation",
    "deadline",
    "workdir",
    "stdout",
    "stderr",
    "arraytaskthrottle",
    "mailtype",
    "mailuser",
    "licenses",
)
#: The longest job name (as a submitted job's).
MAX_NAME: Final = 200
NODE_STATES: Final = {"drain": "drain", "resume": "resume", "undrain": "resume", "idle": "resume"}
RESERVATION_KEYS: Final = (
    "starttime",
    "endtime",
    "duration",
    "nodes",
    "users",
    "accounts",
    "flags",
)
#: The keys that name what ``update`` changes, each with what it is.
TARGETS: Final = {"jobid": "job", "job": "job", "nodename": "node", "reservationname": "res"}


class Pairs(dict[str, str]):
    """``Key=Value`` words by lower-case key (a key given twice: the last), with each key as
    it was written (:attr:`written`) for messages."""

    def __init__(self, words: Sequence[str]) -> None:
        super().__init__()
        self.written: dict[str, str] = {}
        for word in words:
            key, eq, value = word.partition("=")
            if not eq or not key:
                raise ScontrolError(f"'{word}' is not Key=Value")
            self[key.lower()] = value
            self.written[key.lower()] = key


def pairs(words: Sequence[str]) -> Pairs:
    """The ``Key=Value`` words ``words`` (:class:`Pairs`)."""
    return Pairs(words)


def target(given: Pairs) -> str:
    """What ``update`` changes: ``job``, ``node`` or ``res`` (the one key that names it)."""
    named = [k for k in given if k in TARGETS]
    if len(named) != 1:
        raise ScontrolError(
            "update: name what to change: JobId=ID, NodeName=NODES or ReservationName=NAME"
        )
    if not given[named[0]]:
        raise ScontrolError(f"update: {given.written[named[0]]}= names nothing")
    return TARGETS[named[0]]


#: Slurm's spelling of the keys taken, for messages.
SPELLING: Final = {
    "timelimit": "TimeLimit",
    "priority": "Priority",
    "qos": "QOS",
    "nice": "Nice",
    "state": "State",
    "reason": "Reason",
    "name": "Name",
    "jobname": "JobName",
    "comment": "Comment",
    "partition": "Partition",
    "dependency": "Dependency",
    "starttime": "StartTime",
    "begintime": "BeginTime",
    "endtime": "EndTime",
    "duration": "Duration",
    "nodes": "Nodes",
    "users": "Users",
    "accounts": "Accounts",
    "flags": "Flags",
}


def _refuse_others(given: Pairs, known: Sequence[str], what: str) -> None:
    others = [given.written.get(k, k) for k in given if k not in known and k not in TARGETS]
    if others:
        raise ScontrolError(
            f"update: {what}'s {', '.join(others)} cannot be changed here "
            f"(only {', '.join(SPELLING[k] for k in known)})"
        )


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """``update JobId=…``: the jobs and what changes. ``time_limit_s``: a new limit;
    ``time_delta_s``: added to (negative: taken from) each job's own (``TimeLimit=+30``);
    ``name``, ``comment``: new ones (``""``: none); ``partition``: fusesched's queue;
    ``dependencies``: the new ones as the API takes them (``[]``: none any more);
    ``begin_time``: a Unix time. None: kept."""

    job_ids: list[str]
    priority: int | None = None
    qos: str | None = None
    time_limit_s: float | None = None
    time_delta_s: float | None = None
    name: str | None = None
    comment: str | None = None
    partition: str | None = None
    dependencies: list[dict[str, str]] | None = None
    begin_time: float | None = None


def job_update(given: Pairs, now: float | None = None) -> JobUpdate:
    """``update JobId=ID[,ID…] [TimeLimit=T] [Priority=N|Nice=N] [QOS=Q] [Name=N|JobName=N]
    [Comment=C] [Partition=P] [Dependency=D] [StartTime=T|BeginTime=T]``; ``Nice=N`` is
    the priority ``-N``, as ``sbatch --nice`` gives it (:func:`_nice`); ``Dependency=`` and
    ``StartTime=`` take sbatch's ``--dependency`` and ``--begin`` (read at ``now``; None:
    the clock's time), an empty ``Dependency=`` clears the dependencies."""
    unserved = [given.written[k] for k in given if k in JOB_KEYS_UNSERVED]
    if unserved:
        raise ScontrolError(
            f"update: a job's {', '.join(unserved)} cannot be changed here: fusesched's "
            "update changes a job's TimeLimit, Priority (or Nice), QOS, Name, Comment, "
            "Partition, Dependency and StartTime alone (the others would need the "
            "controller to change them)"
        )
    _refuse_others(given, JOB_KEYS, "a job")
    ids = [j for j in (given.get("jobid") or given.get("job") or "").split(",") if j]
    if not any(k in given for k in JOB_KEYS):
        raise ScontrolError(
            "update: give TimeLimit=, Priority=, Nice=, QOS=, Name=, Comment=, Partition=, "
            "Dependency= or StartTime="
        )
    limit, delta = _time_limit(given)
    priority = None
    if "priority" in given:
        text = given["priority"]
        digits = text.removeprefix("-")
        if not (digits.isascii() and digits.isdigit()):
            raise ScontrolError(f"Priority: a whole number, not {text!r}")
        priority = int(text)
    if "nice" in given:
        if priority is not None:
            raise ScontrolError("update: give Priority= or Nice=, not both")
        priority = _nice(given["nice"])
    qos = given.get("qos")
    if qos is not None and not qos:
        raise ScontrolError("QOS: name a QoS")
    partition = given.get("partition")
    if partition is not None and (not partition or "," in partition):
        raise ScontrolError(f"Partition: name one partition, not {partition!r}")
    return JobUpdate(
        ids,
        priority,
        qos,
        limit,
        delta,
        name=_name(given),
        comment=_comment(given.get("comment")),
        partition=partition,
        dependencies=_dependencies(given.get("dependency")),
        begin_time=_begin(given, now),
    )


def _time_limit(given: Pairs) -> tuple[float | None, float | None]:
    """``TimeLimit=T`` (a new limit) or ``TimeLimit=+T`` / ``-T`` (added, taken): (limit,
    delta), None where not given."""
    if "timelimit" not in given:
        return None, None
    text = given["timelimit"]
    sign = text[:1] if text[:1] in "+-" else ""
    try:
        seconds = parse_slurm_time(text[len(sign) :])
    except ValueError as exc:
        raise ScontrolError(f"TimeLimit: {exc}") from None
    if seconds is None:
        raise ScontrolError("TimeLimit: a time limit cannot be lifted: give a new limit")
    if sign:
        return None, (seconds if sign == "+" else -seconds)
    return seconds, None


def _name(given: Pairs) -> str | None:
    """``Name=`` or ``JobName=`` (Slurm's two names for it; ``""``: no name)."""
    names = {given[k] for k in ("name", "jobname") if k in given}
    if len(names) > 1:
        raise ScontrolError("update: give Name= or JobName=, not both")
    if not names:
        return None
    name = names.pop()
    if any(ch in name for ch in "\n\r\t"):
        raise ScontrolError("Name: the job name must be one line")
    if len(name) > MAX_NAME:
        raise ScontrolError(
            f"Name: the job name is {len(name)} characters long: at most {MAX_NAME}"
        )
    return name


def _comment(text: str | None) -> str | None:
    """``Comment=`` checked as sbatch's ``--comment`` (``""``: none)."""
    if not text:
        return text
    from fusesched.submit.request import JobRequest

    try:
        return JobRequest._comment(text)
    except ValueError as exc:
        raise ScontrolError(f"Comment: {exc}") from None


def _dependencies(text: str | None) -> list[dict[str, str]] | None:
    """``Dependency=`` as sbatch's ``--dependency`` (``afterok:12,singleton``…); empty: none
    any more (``[]``)."""
    if text is None:
        return None
    if not text.strip():
        return []
    from fusesched.submit.syntax import parse_dependencies

    try:
        return [d.model_dump(mode="json") for d in parse_dependencies(text)]
    except ValueError as exc:
        raise ScontrolError(f"Dependency: {exc}") from None


def _begin(given: Pairs, now: float | None) -> float | None:
    """``StartTime=`` (Slurm's) or ``BeginTime=`` as sbatch's ``--begin``: a Unix time."""
    texts = {given.written[k]: given[k] for k in ("starttime", "begintime") if k in given}
    if len(texts) > 1:
        raise ScontrolError("update: give StartTime= or BeginTime=, not both")
    if not texts:
        return None
    from fusesched.submit.begin import FORMS, parse_begin

    ((key, text),) = texts.items()
    if not text.strip():
        raise ScontrolError(f"{key}: give a time ({FORMS})")
    try:
        return parse_begin(text, time.time() if now is None else now, what="start time")
    except ValueError as exc:
        raise ScontrolError(f"{key}: {exc}") from None


def _nice(text: str) -> int:
    """``Nice=N``: the job's priority ``-N`` (``sbatch --nice``'s: a user may only lower a
    priority, so a negative adjustment is an admin's)."""
    from fusesched.submit.sbatch_options import nice_priority

    if not text:
        raise ScontrolError("Nice: give an adjustment (a whole number)")
    try:
        return nice_priority(text)
    except ValueError as exc:
        raise ScontrolError(f"Nice: {exc}") from None


def node_update(given: Pairs) -> tuple[list[str], str, str]:
    """``update NodeName=NODES State=DRAIN Reason=WHY`` or ``State=RESUME``: (the nodes,
    ``drain`` or ``resume``, the reason)."""
    _refuse_others(given, ("state", "reason"), "a node")
    try:
        nodes = expand_hostlist(given["nodename"])
    except ValueError as exc:
        raise ScontrolError(f"NodeName: {exc}") from None
    state = NODE_STATES.get(given.get("state", "").lower())
    if state is None:
        raise ScontrolError(
            f"update: a node's State={given.get('state', '')} is not supported here "
            "(State=DRAIN Reason=WHY, or State=RESUME)"
        )
    reason = given.get("reason", "")
    if state == "drain" and not reason.strip():
        raise ScontrolError("update: State=DRAIN needs Reason=WHY (as Slurm's)")
    return nodes, state, reason


@dataclass(frozen=True, slots=True)
class ReservationSpec:
    """A reservation as ``create reservation`` gives it."""

    name: str
    nodes: list[str]
    start: str
    end: str | None
    duration: str | None
    users: list[str]
    tenants: list[str]


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


def _duration(text: str | None) -> str | None:
    """Slurm's ``Duration`` (minutes, ``[D-]HH:MM:SS``…) as a duration fusesched reads."""
    if text is None:
        return None
    try:
        seconds = parse_slurm_time(text)
    except ValueError as exc:
        raise ScontrolError(f"Duration: {exc}") from None
    if seconds is None:
        raise ScontrolError("Duration: a reservation needs an end (not UNLIMITED)")
    return f"{seconds:g}s"


def _flags(text: str | None) -> None:
    """Only ``MAINT`` is taken: a reservation for no users or accounts is one already."""
    other = [f for f in _names(text) if f.upper() != "MAINT"]
    if other:
        raise ScontrolError(f"Flags={','.join(other)} is not supported here (only MAINT)")


def new_reservation(given: Pairs) -> ReservationSpec:
    """``create reservation ReservationName=R StartTime=T (EndTime=T|Duration=D) Nodes=N
    [Users=U,…] [Accounts=A,…] [Flags=MAINT]`` (accounts are fusesched's tenants)."""
    keys = ("reservationname", "reservation", *RESERVATION_KEYS)
    others = [given.written.get(k, k) for k in given if k not in keys]
    if others:
        raise ScontrolError(
            f"create reservation: {', '.join(others)} not supported here "
            "(ReservationName, StartTime, EndTime, Duration, Nodes, Users, Accounts, Flags=MAINT)"
        )
    name = given.get("reservationname") or given.get("reservation") or ""
    if not name:
        raise ScontrolError("create reservation: give ReservationName=NAME")
    if not given.get("nodes"):
        raise ScontrolError("create reservation: give Nodes=HOSTLIST (fusesched reserves nodes)")
    try:
        nodes = expand_hostlist(given["nodes"])
    except ValueError as exc:
        raise ScontrolError(f"Nodes: {exc}") from None
    _flags(given.get("flags"))
    return ReservationSpec(
        name,
        nodes,
        given.get("starttime") or "now",
        given.get("endtime"),
        _duration(given.get("duration")),
        _names(given.get("users")),
        _names(given.get("accounts")),
    )


def option_text(message: str) -> str:
    """A reservation reader's message (``--start: …``) with scontrol's key names."""
    for option, key in (("--start", "StartTime"), ("--end", "EndTime"), ("--duration", "Duration")):
        message = message.replace(option, key)
    return message


@dataclass(frozen=True, slots=True)
class ReservationChange:
    """``update ReservationName=R …``: what changes (None: kept; an empty list clears)."""

    name: str
    start: str | None
    end: str | None
    duration: str | None
    nodes: list[str] | None
    users: list[str] | None
    tenants: list[str] | None


def reservation_change(given: Pairs) -> ReservationChange:
    """``update ReservationName=R [StartTime=T] [EndTime=T|Duration=D] [Nodes=N] [Users=U,…]
    [Accounts=A,…]``."""
    _refuse_others(given, RESERVATION_KEYS, "a reservation")
    _flags(given.get("flags"))
    nodes = None
    if "nodes" in given:
        try:
            nodes = expand_hostlist(given["nodes"])
        except ValueError as exc:
            raise ScontrolError(f"Nodes: {exc}") from None
    return ReservationChange(
        given["reservationname"],
        given.get("starttime"),
        given.get("endtime"),
        _duration(given.get("duration")),
        nodes,
        None if "users" not in given else _names(given["users"]),
        None if "accounts" not in given else _names(given["accounts"]),
    )
