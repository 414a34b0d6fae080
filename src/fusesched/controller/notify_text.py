"""What a job event notification says: the :class:`Notice` (the facts of one event) and its
mail subject, mail body and webhook JSON, worded as Slurm words its mails.

Subjects, as Slurm's with ``fusesched`` for ``Slurm``::

    fusesched Job_id=12 Name=train Began, Queued time 00:00:03
    fusesched Job_id=12 Name=train Ended, Run time 00:01:05, COMPLETED, ExitCode 0
    fusesched Job_id=12 Name=train Failed, Run time 00:00:01, FAILED, ExitCode 1
    fusesched Job_id=12 Name=train Failed, Run time 00:00:34, NODE_FAIL
    fusesched Job_id=12 Name=train Requeued, Run time 00:00:40
    fusesched Job_id=12 Name=train Reached 80% of time limit, Run time 00:00:48
    fusesched Job_id=12 Name=train Reached time limit, Run time 00:01:00
    fusesched Job_id=12 Name=train Invalid dependency, CANCELLED
    fusesched Array Summary Job_id=7_* Name=sweep Ended, COMPLETED, ExitCode [0-0]

Pure: no I/O, no clock (times are given).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from fusesched.model.phases import JobPhase, node_failed, oom_killed
from fusesched.submit.job_notify import TIME_LIMIT_LEVELS, NotifyEvent

#: the first word of every subject
PREFIX: Final = "fusesched"


@dataclass(frozen=True, slots=True)
class Notice:
    """One event of one job (or, with ``members``, the summary of a whole array) to tell
    ``to`` of. ``state`` is upper case as Slurm's (``RUNNING``, ``COMPLETED``, ``FAILED``,
    ``NODE_FAIL``, ``TIMEOUT``, ``CANCELLED``, ``REQUEUED``, ``MIXED`` for an array whose
    members ended differently); ``time`` is when the event happened."""

    event: NotifyEvent
    job_id: str
    name: str
    user: str
    to: str
    state: str
    time: float
    submit_time: float
    start_time: float | None = None
    end_time: float | None = None
    exit_code: int | None = None
    time_limit_s: float | None = None
    reason: str = ""
    nodes: tuple[str, ...] = ()
    queue: str = "default"
    tenant: str = "default"
    array_parent: str | None = None  # the array a member belongs to
    members: int = 0  # an array summary: how many members it covers (0: one job)
    exit_codes: tuple[int, int] | None = None  # an array summary: lowest and highest

    @property
    def run_time_s(self) -> float:
        if self.start_time is None:
            return 0.0
        end = self.end_time if self.end_time is not None else self.time
        return max(0.0, end - self.start_time)

    @property
    def queued_time_s(self) -> float:
        began = self.start_time if self.start_time is not None else self.time
        return max(0.0, began - self.submit_time)


def slurm_state(phase: JobPhase, reason: str = "") -> str:
    """A job's state as Slurm's mail names it: its phase upper case, ``NODE_FAIL`` for a job
    failed because a node of it was lost (its reason marked so: ``NodeDown: …``),
    ``OUT_OF_MEMORY`` for one the kernel's OOM killer ended (as sacct and squeue show them)."""
    if phase is JobPhase.FAILED and node_failed(reason):
        return "NODE_FAIL"
    if phase is JobPhase.FAILED and oom_killed(reason):
        return "OUT_OF_MEMORY"
    return phase.value.upper()


#: States whose job has no exit status of its own to tell (a lost node's; the OOM killer's
#: SIGKILL, which Slurm reports as its own pseudo-signal): their mail names none, as Slurm's.
NO_EXIT_CODE: Final = frozenset({"NODE_FAIL", "OUT_OF_MEMORY"})


def hms(seconds: float) -> str:
    """Whole seconds as Slurm writes a duration: ``[D-]HH:MM:SS``."""
    whole = int(max(0.0, seconds))
    days, rest = divmod(whole, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _exit(notice: Notice) -> str:
    if notice.exit_codes is not None:
        low, high = notice.exit_codes
        return f", ExitCode [{low}-{high}]"
    return "" if notice.exit_code is None else f", ExitCode {notice.exit_code}"


def what(notice: Notice) -> str:
    """The part of the subject after the job: ``Ended, Run time 00:01:05, COMPLETED, …``."""
    event = notice.event
    run = f"Run time {hms(notice.run_time_s)}"
    if event is NotifyEvent.BEGIN:
        return f"Began, Queued time {hms(notice.queued_time_s)}"
    if event is NotifyEvent.REQUEUE:
        return f"Requeued, {run}"
    if event is NotifyEvent.INVALID_DEPEND:
        return f"Invalid dependency, {notice.state}"
    if event in TIME_LIMIT_LEVELS:
        level = TIME_LIMIT_LEVELS[event]
        reached = "Reached time limit" if level == 100 else f"Reached {level}% of time limit"
        return f"{reached}, {run}"
    verb = "Failed" if event is NotifyEvent.FAIL else "Ended"
    if notice.members:
        return f"{verb}, {notice.state}{_exit(notice)}"
    return f"{verb}, {run}, {notice.state}{_exit(notice)}"


def subject(notice: Notice) -> str:
    """The mail's subject (one line)."""
    job = f"Job_id={notice.job_id}"
    if notice.members:
        job = f"Array Summary {job}_*"
    return _one_line(f"{PREFIX} {job} Name={notice.name or '-'} {what(notice)}")


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))


def body(notice: Notice) -> str:
    """The mail's text: the job's key facts, one per line."""
    lines = [
        subject(notice),
        "",
        f"Job_id={notice.job_id}" + (f"_* ({notice.members} members)" if notice.members else ""),
        f"Name={notice.name or '-'}",
        f"User={notice.user} Tenant={notice.tenant} Queue={notice.queue}",
        f"State={notice.state}" + _exit(notice).replace(", ExitCode ", " ExitCode="),
    ]
    if notice.array_parent is not None:
        lines.append(f"Array={notice.array_parent}")
    if notice.reason:
        lines.append(f"Reason={_one_line(notice.reason)}")
    lines += [
        f"Submitted={_when(notice.submit_time)}",
        f"Started={_when(notice.start_time)}",
        f"Ended={_when(notice.end_time)}",
        f"Queued time {hms(notice.queued_time_s)}",
    ]
    if notice.start_time is not None and not notice.members:
        lines.append(f"Run time {hms(notice.run_time_s)}")
    limit = notice.time_limit_s
    lines.append(f"Time limit {hms(limit) if limit is not None else 'none'}")
    if notice.nodes:
        lines.append(f"Nodes={','.join(notice.nodes)}")
    return "\n".join(lines) + "\n"


def payload(notice: Notice) -> dict[str, Any]:
    """The webhook's JSON object."""
    return {
        "event": notice.event.value,
        "job_id": notice.job_id,
        "name": notice.name,
        "user": notice.user,
        "to": notice.to,
        "state": notice.state,
        "exit_code": notice.exit_code,
        "run_time_s": round(notice.run_time_s, 3),
        "queued_time_s": round(notice.queued_time_s, 3),
        "time": notice.time,
        "submit_time": notice.submit_time,
        "start_time": notice.start_time,
        "end_time": notice.end_time,
        "time_limit_s": notice.time_limit_s,
        "reason": notice.reason,
        "nodes": list(notice.nodes),
        "queue": notice.queue,
        "tenant": notice.tenant,
        "array_parent": notice.array_parent,
        "array_members": notice.members or None,
        "exit_codes": list(notice.exit_codes) if notice.exit_codes is not None else None,
        "subject": subject(notice),
    }
