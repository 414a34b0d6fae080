"""Slurm's ``InactiveLimit`` (pure: the caller passes the times; no I/O, no clock).

A job submitted *attended* (the request field ``attended``: ``fusesched salloc``'s holding job
and ``fusesched run``'s job) has a holder, the command that waits on it, which tells the
controller every few seconds that it is still there (``POST /v1/jobs/{id}/alive``; the
interval is :func:`ping_every` of the limit). :class:`Holders` keeps, per attended job, when
its holder was last heard from, and says which have been silent longer than the limit
(:meth:`Holders.overdue`): their salloc or run was killed outright (SIGKILL, the login node
rebooted, the SSH session's host died) or suspended (Ctrl-Z), so nobody will use the
allocation; the controller ends them (:mod:`fusesched.controller.attendance`) as Slurm does,
a running one as timed out (Slurm's state ``TIMEOUT``, reason ``InactiveLimit``) with
:func:`reason`, a waiting one as cancelled.

Times are monotonic seconds: a step of the wall clock must not end every allocation at once.
A controller that starts (or restarts) hears from every attended job it recovers at its start:
each holder gets a full limit again, so that the time the controller itself was down never
counts against them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: The start of the reason of a job ended by the limit (Slurm's reason ``InactiveLimit``).
INACTIVE_LIMIT: Final = "InactiveLimit"
#: The controller's default limit (``--inactive-limit``), in seconds. Slurm's is 0 (off); a
#: fused scheduler lends idle capacity to the other kinds of work, and an abandoned
#: interactive allocation holds its nodes idle until its time limit (often hours): five
#: minutes rides out a network blip, a controller fail-over or a short suspend of a laptop,
#: and gives an abandoned allocation's nodes back within minutes.
DEFAULT_INACTIVE_LIMIT_S: Final = 300
#: The longest limit ``--inactive-limit`` takes, in seconds (Slurm's maximum, about 18 h).
MAX_INACTIVE_LIMIT_S: Final = 65533
#: A holder tells the controller it is alive at least this often (seconds): ten chances
#: within the default limit, and no more than one ping per 30 s from each of 10 000 salloc
#: and run commands (~330 a second, a small part of one core of the controller)...
MAX_PING_S: Final = 30.0
#: ... and at most this often.
MIN_PING_S: Final = 0.2
#: The controller looks for silent holders at least this often (seconds).
MAX_CHECK_S: Final = 5.0
#: The limit of a job on a pseudo-terminal (``fusesched run --pty``), whatever the
#: controller's (off included), unless that is shorter: nobody can type to it once its run is
#: gone, and Slurm ends ``srun --pty``'s job as soon as srun goes.
PTY_LIMIT_S: Final = 30.0


def limit_for(limit_s: float, pty: bool) -> float:
    """The limit of an attended job under the controller's ``limit_s`` (0: off)."""
    if not pty:
        return limit_s
    return min(limit_s, PTY_LIMIT_S) if limit_s > 0 else PTY_LIMIT_S


def ping_every(limit_s: float) -> float:
    """How often a holder says it is alive under ``limit_s`` (0: off): five times within the
    limit, between :data:`MIN_PING_S` and :data:`MAX_PING_S` (off: the longest, so that a
    controller restarted with a limit hears from it soon)."""
    if limit_s <= 0:
        return MAX_PING_S
    return max(MIN_PING_S, min(limit_s / 5, MAX_PING_S))


def check_every(limit_s: float) -> float:
    """How often the controller looks for silent holders: four times within the limit, at
    least every :data:`MAX_CHECK_S`."""
    return min(limit_s / 4, MAX_CHECK_S)


def reason(silent_s: float, limit_s: float, running: bool, pty: bool = False) -> str:
    """Why the job was ended: its salloc or run has not answered for ``silent_s`` seconds
    (``pty``: a terminal job's, under its own limit)."""
    what = "holding the allocation" if running else "waiting for the allocation"
    whose = "a terminal job's limit" if pty else "the controller's --inactive-limit"
    return (
        f"{INACTIVE_LIMIT}: the salloc/run {what} stopped answering for {silent_s:.0f} s "
        f"({whose} is {limit_s:g} s)"
    )


def ended_by_limit(why: str) -> bool:
    """Whether a job's end reason is the limit's (its exit then counts as timed out)."""
    return why.startswith(INACTIVE_LIMIT)


@dataclass(frozen=True, slots=True)
class Silent:
    """An attended job whose holder has not been heard from for ``silent_s`` seconds."""

    job_id: str
    silent_s: float


class Holders:
    """When each attended job's holder was last heard from, and who is overdue.

    ``limit_s`` 0 (or less) is off: nobody is ever overdue, and nothing is kept, but for
    the jobs given a limit of their own (:meth:`heard`'s ``limit_s``: a pseudo-terminal's)."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._heard: dict[str, float] = {}
        self._limits: dict[str, float] = {}  # a job's own limit, where it has one
        self._next_check = float("-inf")

    @property
    def on(self) -> bool:
        return self.limit_s > 0

    def heard(self, job_id: str, now: float, limit_s: float | None = None) -> None:
        """A sign of life of ``job_id``'s holder at ``now``: its submission, a ping, or the
        controller's start (a fresh limit); ``limit_s``: the job's own limit from now on."""
        if limit_s is not None and limit_s > 0:
            self._limits[job_id] = limit_s
        if self.on or job_id in self._limits:
            self._heard[job_id] = max(now, self._heard.get(job_id, now))

    def limit_of(self, job_id: str) -> float:
        """``job_id``'s limit (0: off)."""
        return self._limits.get(job_id, self.limit_s)

    def knows(self, job_id: str) -> bool:
        return job_id in self._heard

    def forget(self, job_id: str) -> None:
        """``job_id`` ended (or was ended by the limit): no longer watched."""
        self._heard.pop(job_id, None)
        self._limits.pop(job_id, None)

    def __len__(self) -> int:
        return len(self._heard)

    def due(self, now: float) -> bool:
        """Whether :meth:`overdue` would look at the holders at ``now``."""
        return (self.on or bool(self._limits)) and now >= self._next_check

    def overdue(self, now: float) -> list[Silent]:
        """The jobs whose holder has been silent longer than the limit at ``now``, oldest
        silence first; none between checks (one every :func:`check_every` of the limit).
        They stay watched until :meth:`forget`: one the caller cannot end yet is found
        again at the next check."""
        if not self.due(now):
            return []
        shortest = min(self._limits.values(), default=self.limit_s)
        self._next_check = now + check_every(min(shortest, self.limit_s) if self.on else shortest)
        late = [
            Silent(job_id, now - last)
            for job_id, last in self._heard.items()
            if now - last > self.limit_of(job_id)
        ]
        late.sort(key=lambda s: (-s.silent_s, s.job_id))
        return late
