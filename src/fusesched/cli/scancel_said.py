"""What Slurm 22.05's scancel says, and its exit status, for ``fusesched scancel`` (the
``cancel`` command by Slurm's name, cli/slurm_names.py), checked against the real one; with
``--json`` it answers as ``cancel`` does. Tools read these lines: qtoolkit (jobflow-remote's
queue layer) runs ``scancel -v ID`` and looks on stderr for ``scancel: Terminating job ID``.

Nothing goes to stdout. On stderr, with ``-v``, a line for each job acted on: ``scancel:
Terminating job 5`` (a cancel; ``-b``: ``Terminating batch job 5``, ``-f``: ``full job``),
``scancel: Signal 10 to job 5`` (``--signal``, its number; ``batch job``, ``full job``),
and for filters that match no job ``scancel: error: No active jobs match ALL job filters,
including: job_name=x `` (exit 0). Errors are ``scancel: error: Kill job error on job id 5:
REASON``:

* a cancel of an unknown job (``Invalid job id specified``) or of one that has ended
  (``Job/step already completing or completed``): said with ``-v`` only, exit 0;
* with ``--signal`` or ``-b``, Slurm first checks each id against the jobs that have not
  ended: an unknown or ended one, or one being cancelled, is ``Invalid job id specified``,
  said unless ``-Q``, exit 1 (said before the other lines);
* another user's job: ``Access/permission denied``, exit 210;
* a signal to a waiting (or held) job: ``Job can not be altered now, try again later``,
  exit 228 (Slurm retries for about 95 s first, in case the job starts; this says it at once);
* what fusesched refuses that Slurm has no word for (a job whose agent is too old for
  signals, one an external pool runs, one still waiting to be adopted after a restart, a
  controller failure): fusesched's own reason, exit 1.

An array's id signals its running members, each said (``Signal 10 to job 7_1``), a waiting
one refused (228); a combined id (``7_[1-3]``) is each member, signalled in turn, or cancelled
in one request and said as given (``Terminating job 7_[1-3]``). With filters, a signal goes
to every matching job that has not ended, as Slurm's (a waiting one refused: 228).

The exit status is Slurm's: the greatest of its error numbers met, modulo 256 (2002
``ESLURM_ACCESS_DENIED``: 210; 2020 ``ESLURM_TRANSITION_STATE_NO_UPDATE``: 228), or 1 from
the check of the ids. A malformed id (``abc``, ``0``, ``12x``) is ``scancel: error: Invalid
job id abc``, exit 1, and no id given with no filter ``scancel: error: No job
identification provided``, exit 1, before anything is done. ``-s KILL`` (or 9) cancels, as
Slurm's KILL ends the job. Slurm's ``-v`` lines about its own plugins (``select/cons_tres:
…``) and its ``-vv`` debug lines have no counterpart here.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import typer

#: Slurm's error numbers and words (slurm_errno.h), as scancel says them.
INVALID: Final = (2017, "Invalid job id specified")
ALREADY_DONE: Final = (2021, "Job/step already completing or completed")
ACCESS_DENIED: Final = (2002, "Access/permission denied")
TRANSITION: Final = (2020, "Job can not be altered now, try again later")
#: The exit status of Slurm's check of the ids (an unknown or ended job with --signal or -b).
CHECK_FAILED: Final = 1

#: A job id as Slurm's scancel reads one: a number above 0, then an array task (``_3``,
#: ``_[1-5]``), a heterogeneous component (``+1``) or a step (``.0``).
_JOB_ID = re.compile(r"(\d+)(?:[_+.]\S*)?")
#: fusesched's refusals of a signal (controller/signals.py, controller/holds.py), read as
#: Slurm's: a waiting job, and a job that has ended or is being stopped.
_WAITING = re.compile(r"\bis waiting: only a running job can be signalled")
_ENDED = re.compile(r"\bhas ended\b|\bis being stopped\b|\bis \w+: only a running job can be")
#: scancel's filters as its "No active jobs match" line names them, in its order.
_STATE_WORDS: Final = {"PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED"}


@dataclass
class Said:
    """What scancel says on stderr, gathered as the jobs are acted on and said at the end in
    Slurm's order (the check's errors first), and the exit status."""

    verbose: bool
    quiet: bool
    checked: list[str] = field(default_factory=list)  # the check's errors: said first
    lines: list[str] = field(default_factory=list)
    worst: int = 0

    def acted(self, line: str) -> None:
        """``-v``'s line for a job acted on."""
        if self.verbose:
            self.lines.append(line)

    def error(self, job_id: str, reason: str, code: int, *, verbose_only: bool = False) -> None:
        """``Kill job error on job id …`` (``verbose_only``: said with ``-v`` only)."""
        if self.verbose or not verbose_only:
            self.lines.append(f"error: Kill job error on job id {job_id}: {reason}")
        self.worst = max(self.worst, code)

    def not_active(self, job_id: str) -> None:
        """The check's error for an id that is no job that has not ended."""
        if not self.quiet:
            self.checked.append(f"error: Kill job error on job id {job_id}: {INVALID[1]}")
        self.worst = max(self.worst, CHECK_FAILED)

    def none_matched(self, filters: str) -> None:
        """``-v``'s line for filters that matched no job (exit 0)."""
        if self.verbose:
            self.lines.append(f"error: No active jobs match ALL job filters, including: {filters}")

    def close(self) -> None:
        """Say it all on stderr and exit with Slurm's status (none: return)."""
        for line in (*self.checked, *self.lines):
            sys.stderr.write(f"scancel: {line}\n")
        sys.stderr.flush()
        if self.worst:
            raise typer.Exit(self.worst % 256 or 1)


def check_ids(job_ids: Sequence[str]) -> None:
    """Exit 1 as Slurm's scancel for the first malformed id (before anything is done)."""
    for job_id in job_ids:
        found = _JOB_ID.fullmatch(job_id)
        if found is None or int(found.group(1)) == 0:
            sys.stderr.write(f"scancel: error: Invalid job id {job_id}\n")
            raise typer.Exit(1)


def no_identification() -> None:
    """Neither an id nor a filter: Slurm's words, exit 1."""
    sys.stderr.write("scancel: error: No job identification provided\n")
    raise typer.Exit(1)


def is_kill(signal: str | None) -> bool:
    """Whether ``--signal`` names SIGKILL (``KILL``, ``SIGKILL``, ``9``): Slurm's default
    signal, which ends the job; fusesched sends no KILL on demand, it cancels."""
    if signal is None:
        return False
    word = signal.strip().upper()
    return word.removeprefix("SIG") == "KILL" or (word.isdigit() and int(word) == 9)


def action(job_id: str, number: int | None, target: str) -> str:
    """``-v``'s line for one job: ``Terminating job 5`` (``number`` None: a cancel) or
    ``Signal 10 to job 5``; ``target`` ``batch`` or ``full`` (-b, -f) says so."""
    kind = f"{target} " if target in ("batch", "full") else ""
    if number is None:
        return f"Terminating {kind}job {job_id}"
    return f"Signal {number} to {kind}job {job_id}"


def signal_refusal(message: str) -> tuple[int, str] | None:
    """Slurm's error for fusesched's refusal (409) of a signal: :data:`TRANSITION` for a
    waiting job, None for one that has ended or is being stopped (the check's error), else
    fusesched's own reason (exit 1)."""
    if _WAITING.search(message):
        return TRANSITION
    if _ENDED.search(message):
        return None
    return (CHECK_FAILED, message)


def cancel_ids(client: Any, job_ids: Sequence[str], target: str, checked: bool, said: Said) -> None:
    """Cancel each job as Slurm's scancel (``checked``: ``-b`` or ``-s KILL``, whose ids Slurm
    checks first), gathering what it says in ``said``."""
    from fusesched.client_base import ControllerError

    for job_id in job_ids:
        try:
            cancelled = client.cancel(job_id)
        except ControllerError as exc:
            if exc.status == 404 and checked:
                said.not_active(job_id)
                continue
            said.acted(action(job_id, None, target))
            if exc.status == 404:
                said.error(job_id, INVALID[1], 0, verbose_only=True)
            elif exc.status == 403:
                said.error(job_id, ACCESS_DENIED[1], ACCESS_DENIED[0])
            else:
                said.error(job_id, str(exc), CHECK_FAILED)
            continue
        if not cancelled and checked:
            said.not_active(job_id)
            continue
        said.acted(action(job_id, None, target))
        if not cancelled:
            said.error(job_id, ALREADY_DONE[1], 0, verbose_only=True)


def by_ids(
    client: Any, job_ids: Sequence[str], name: str | None, target: str, checked: bool, said: Said
) -> None:
    """Cancel (``name`` None) or signal each of ``job_ids`` in turn as Slurm's scancel. A
    combined id of an array's members (``7_[1-3]``, as squeue shows waiting ones): a signal
    goes to each member, each refused or unknown one said with its exit status (Slurm's:
    228 for a waiting one, 1 for one that is none); a cancel takes them in one request,
    said as given (``Terminating job 7_[1-3]``; members that are none: ``Invalid job id
    specified`` with ``-v``)."""
    from fusesched.model.array_tasks import member_ids

    for job_id in job_ids:
        members = member_ids(job_id)  # (checked by the command: readable)
        if name is not None:
            signal_ids(client, members or [job_id], name, target, said)
        elif members is None:
            cancel_ids(client, [job_id], target, checked, said)
        else:
            _cancel_members(client, job_id, members, target, checked, said)


def _cancel_members(
    client: Any, job_id: str, members: list[str], target: str, checked: bool, said: Said
) -> None:
    """Cancel the members of the combined id ``job_id`` in one request, said as Slurm's."""
    from fusesched.cli import cancel_filters as cf

    cancelled, denied = cf.cancel_matched(client, cf.Filters(ids=members))
    if checked and not cancelled and not denied:  # (-b: Slurm's check of the ids)
        said.not_active(job_id)
        return
    said.acted(action(job_id, None, target))
    if denied:
        said.error(job_id, ACCESS_DENIED[1], ACCESS_DENIED[0])
    if len(cancelled) + len(denied) < len(members):
        said.error(job_id, INVALID[1], 0, verbose_only=True)


def signal_ids(client: Any, job_ids: Sequence[str], name: str, target: str, said: Said) -> None:
    """Signal each job's processes that ``target`` names (cli/job_signals.py) as Slurm's
    scancel, gathering what it says in ``said``: ``-v``'s line for each job signalled (an
    array's id: each member signalled, as Slurm's says them)."""
    from fusesched.cli.job_signals import send
    from fusesched.client_base import ControllerError
    from fusesched.submit.job_signal import SIGNALS

    number = SIGNALS[name]
    for job_id in job_ids:
        try:
            answer = send(client, job_id, name, target)
        except ControllerError as exc:
            if exc.status == 404:
                said.not_active(job_id)
                continue
            refusal = (
                ACCESS_DENIED
                if exc.status == 403
                else signal_refusal(str(exc))
                if exc.status == 409
                else (CHECK_FAILED, str(exc))
            )
            if refusal is None:
                said.not_active(job_id)
                continue
            said.acted(action(job_id, number, target))
            said.error(job_id, refusal[1], refusal[0])
            continue
        for signalled in answer.get("signalled") or [job_id]:
            said.acted(action(signalled, number, target))
        for member, why in (answer.get("skipped") or {}).items():  # (an array's)
            if signal_refusal(why) == TRANSITION:  # (a waiting member: refused, as Slurm's)
                said.acted(action(member, number, target))
                said.error(member, TRANSITION[1], TRANSITION[0])


def filters_said(f: Any, state: Sequence[str] | None, nodelist: str | None) -> str:
    """The filters as Slurm's ``No active jobs match ALL job filters, including:`` line names
    them (``account=bio job_name=x state=PENDING user_name=alice ``; ``--me``: your uid)."""
    from fusesched.cli.id_lists import comma_list

    states = [_STATE_WORDS.get(w.upper(), w.upper()) for w in comma_list(state, "job state")]
    named = [
        ("account", ",".join(f.accounts)),
        ("job_name", ",".join(f.names)),
        ("nodelist", nodelist or ""),
        ("partition", ",".join(f.queues)),
        ("qos", ",".join(f.qos)),
        ("state", ",".join(dict.fromkeys(states))),
        ("user_name", str(os.getuid()) if f.me else ",".join(f.users)),
    ]
    return "".join(f"{key}={value} " for key, value in named if value)


def by_filters(
    client: Any, f: Any, name: str | None, target: str, said: Said, filters: str
) -> None:
    """Cancel (``name`` None) or signal the jobs ``f`` matches as Slurm's scancel: each job
    said with ``-v``, another user's refused; none: ``-v``'s ``No active jobs match``."""
    from fusesched.cli import cancel_filters as cf

    f = cf.resolved(client, f)
    if name is not None:  # (every job that matches, as Slurm's: a waiting one is refused)
        ids = [] if f.states == [] else cf.matching_ids(client, f)
        if not ids:
            said.none_matched(filters)
        signal_ids(client, ids, name, target, said)
        return
    cancelled, denied = cf.cancel_matched(client, f)
    for job_id in cancelled:
        said.acted(action(job_id, None, target))
    for job_id in denied:
        said.acted(action(job_id, None, target))
        said.error(job_id, ACCESS_DENIED[1], ACCESS_DENIED[0])
    if not cancelled and not denied:
        said.none_matched(filters)
