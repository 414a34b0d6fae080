"""The controller's side of ``InactiveLimit`` (:mod:`fusesched.controller.inactive`): attended
jobs' holders heard from (:func:`alive`, ``POST /v1/jobs/{id}/alive``; :func:`track` at
submission; :func:`recovered` at the controller's start, a fresh limit for every one), and the
jobs whose holder went silent ended (:func:`check`, from the scheduling loop).

A silent holder's job is ended as Slurm ends it: a running one's tasks are stopped with the
reason ``InactiveLimit: …`` and their exits end it timed out (``TIMEOUT`` in sacct, as Slurm's
``_job_timed_out``; :func:`fusesched.controller.endings.job_may_have_ended` reads the reason),
a waiting one (its salloc killed while it waited) is cancelled with that reason, and so is one
an external pool runs (its cluster reports its own end). A job recovered after a restart and
not adopted (or not handed to the core) yet is ended once it is.

Times here are monotonic seconds (``time.monotonic``), not the controller's clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from fusesched.controller.inactive import Holders, Silent, limit_for, reason
from fusesched.controller.records import UnknownJobError
from fusesched.model.events import JobCancelRequested
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.controller.records import LiveJob
    from fusesched.controller.service import Controller

log = logging.getLogger("fusesched.controller")

#: The exit code a running job ended by the limit reports when none of its tasks gave one
#: first (as a task stopped by SIGTERM at its time limit: -15).
STOPPED_EXIT = -15


class AliveRefused(ValueError):
    """A sign of life for a job that has none to give (ended, not attended, being
    stopped): a 409."""


def recovered(ctl: Controller, now: float | None = None) -> Holders:
    """The holders of a controller that starts: every attended job it recovered is heard
    from now (a full limit again: the time the controller was down does not count)."""
    now = time.monotonic() if now is None else now
    holders = Holders(ctl.config.inactive_limit_s)
    for live in ctl.jobs.values():
        if live.request.attended:
            holders.heard(live.id, now, _own_limit(ctl, live))
    return holders


def _own_limit(ctl: Controller, live: LiveJob) -> float | None:
    """The limit of ``live`` when it is not the controller's (a pseudo-terminal job's)."""
    if live.request.pty is None:
        return None
    return limit_for(ctl.config.inactive_limit_s, pty=True)


def track(ctl: Controller, job_ids: Iterable[str], now: float | None = None) -> None:
    """Attended jobs just submitted: their holder's silence counts from now (with the
    controller's lock held)."""
    now = time.monotonic() if now is None else now
    for job_id in job_ids:
        live = ctl.jobs.get(job_id)
        ctl.holders.heard(job_id, now, None if live is None else _own_limit(ctl, live))


def alive(ctl: Controller, job_id: str, now: float | None = None) -> float:
    """``job_id``'s holder is alive; the controller's limit in seconds (0: off), from which
    the holder knows how often to say so. :class:`UnknownJobError` for an unknown job,
    :class:`AliveRefused` for one that has ended, was not submitted attended or is being
    stopped for good (cancelled, timed out). A job whose run ended but which may be queued
    again (requeued, preempted: the core has not taken its exit yet) is still held: its
    holder must not give up on it."""
    now = time.monotonic() if now is None else now
    with ctl.lock:
        live = ctl.jobs.get(job_id)
        if live is None:
            if ctl.persist.job_exists(job_id):
                raise AliveRefused(f"job {job_id} has ended")
            raise UnknownJobError(job_id)
        if not live.request.attended:
            raise AliveRefused(
                f"job {job_id} was not submitted attended (salloc and run submit theirs so): "
                "no command holds it, and nothing ends it when one goes silent"
            )
        if live.stopping is not None:
            raise AliveRefused(f"job {job_id} is being stopped: {live.stopping}")
        ctl.holders.heard(job_id, now)
        return ctl.holders.limit_of(job_id)


def check(ctl: Controller, now: float | None = None) -> list[str]:
    """End the jobs whose holder has been silent longer than the limit (looked at once every
    few seconds, :meth:`Holders.overdue`); the ids ended."""
    now = time.monotonic() if now is None else now
    ended: list[str] = []
    if not ctl.holders.due(now):  # (most calls: no lock taken)
        return ended
    with ctl.work:
        for silent in ctl.holders.overdue(now):
            live = ctl.jobs.get(silent.job_id)
            if live is None:  # ended meanwhile
                ctl.holders.forget(silent.job_id)
            elif _end(ctl, live, silent):
                ctl.holders.forget(silent.job_id)
                ended.append(live.id)
    if ended:
        ctl.wake()
    return ended


def _end(ctl: Controller, live: LiveJob, silent: Silent) -> bool:
    """End ``live`` for its holder's silence; False when it cannot be yet (not adopted after
    a restart, not the core's yet, or its run ended and the core has not said yet whether it
    is queued again, as a requeued or preempted job is: looked at again at the next check)."""
    rec = ctl.core.jobs.get(live.id)
    if live.adopting or rec is None or live.requeue is not None or live.relaunch is not None:
        return False
    if live.stopping is not None or rec.phase.terminal:
        return True  # ending anyway
    if live.exit_sent:  # (ended, or queued again: then cancelled at a next check)
        return False
    running = rec.phase is JobPhase.RUNNING
    limit, pty = ctl.holders.limit_of(live.id), live.request.pty is not None
    why = reason(silent.silent_s, limit, running, pty)
    log.warning("job %s: %s", live.id, why)
    if not running or live.pool is not None:
        ctl.events.append(JobCancelRequested(live.id, why))
        return True
    live.stopping = why
    if live.first_failure is None:  # (the exits then end it with this reason, timed out)
        live.first_failure = (STOPPED_EXIT, why)
    for task in live.tasks.values():
        ctl.kill_task(task, why)
    return True
