"""Holding waiting jobs and releasing them (Slurm's ``scontrol hold`` / ``release``).

A held job stays ``Pending`` with phase ``held`` and the reason, and never starts until it is
released; then it queues again (``queued``, or ``pending`` while it still waits for its
dependencies). Only waiting jobs can be held: a running one is a :class:`HoldRefused`. The
hold is stored (phase ``held``, reason ``held: …``), so it outlives a controller restart: the
recovered job is handed to the core and held again before any scheduling cycle.

Every function here takes the controller's lock itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fusesched.controller.records import UnknownJobError
from fusesched.model.events import JobHoldRequested, JobReleaseRequested, JobSubmitted
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: the phase a held job is stored with (the core's phase stays ``pending``)
HELD = "held"
#: longest reason kept
MAX_REASON = 1_000
#: the reason of a job submitted held (``hold: true``, ``sbatch --hold``)
AT_SUBMIT = "submitted held"


class HoldRefused(ValueError):
    """A hold or release that cannot be done (the job runs or has ended); a 409."""


def hold(ctl: Controller, job_id: str, reason: str) -> list[str]:
    """Hold ``job_id`` (every waiting member of an array); the ids held. Holding a held job
    again replaces the reason."""
    reason = " ".join(reason.split()) or "held by user"
    if len(reason) > MAX_REASON:
        raise HoldRefused(f"the reason is longer than {MAX_REASON:,} characters")
    now = ctl.clock()
    with ctl.work:
        targets = member_targets(ctl, job_id, lambda t: is_waiting(ctl, t), "waiting", "hold")
        for target in targets:
            live = ctl.jobs[target]
            if target in ctl.core.jobs:
                try:
                    ctl.core.handle(JobHoldRequested(target, reason), now)
                except ValueError as exc:
                    raise HoldRefused(f"{exc} (cancel it instead)") from None
            elif not recovered(ctl, target, live.spec.array_parent):
                # submitted since the last cycle: held right after the core takes it
                ctl.events.append(JobHoldRequested(target, reason))
            # (a recovered job not yet handed to the core is held when it is: after_resubmit)
            live.hold = reason
            ctl.persist.job_held(target, reason, HELD, now)
        ctl.persist.flush()
    ctl.wake()
    return targets


def release(ctl: Controller, job_id: str) -> list[str]:
    """Release ``job_id`` (every held member of an array); the ids released. Releasing a job
    that is not held changes nothing (and returns no id)."""
    now = ctl.clock()
    with ctl.work:
        released = []
        for target in job_targets(ctl, job_id):
            live = ctl.jobs[target]
            if live.hold is None:
                continue
            live.hold = None
            rec = ctl.core.jobs.get(target)
            phase = JobPhase.PENDING.value
            if rec is not None:
                ctl.core.handle(JobReleaseRequested(target), now)
                phase = rec.phase.value
            elif not recovered(ctl, target, live.spec.array_parent):
                ctl.events.append(JobReleaseRequested(target))
            ctl.persist.job_held(target, None, phase, now)
            released.append(target)
        ctl.persist.flush()
    ctl.wake()
    return released


def at_submit(ctl: Controller, job_ids: list[str]) -> list[JobHoldRequested]:
    """The holds of jobs submitted held (their stored phase is ``held`` already)."""
    for job_id in job_ids:
        ctl.jobs[job_id].hold = AT_SUBMIT
    return [JobHoldRequested(job_id, AT_SUBMIT) for job_id in job_ids]


def after_resubmit(ctl: Controller, job_id: str) -> JobHoldRequested | None:
    """The hold to send the core right after a recovered job's submission, if it was held."""
    live = ctl.jobs.get(job_id)
    return None if live is None or live.hold is None else JobHoldRequested(job_id, live.hold)


def stored_hold(phase: str, reason: str) -> str | None:
    """The hold of a stored pending job (None: not held)."""
    return reason.removeprefix("held: ") if phase == HELD else None


def job_targets(ctl: Controller, job_id: str) -> list[str]:
    """``job_id`` if the controller still has it, else its array's members; an ended job is
    a :class:`HoldRefused`, an unknown one an :class:`UnknownJobError`."""
    if job_id in ctl.jobs:
        return [job_id]
    members = [j for j, live in ctl.jobs.items() if live.spec.array_parent == job_id]
    if members:
        return members
    if ctl.persist.job_exists(job_id):
        raise HoldRefused(f"job {job_id} has ended")
    raise UnknownJobError(job_id)


def member_targets(
    ctl: Controller, job_id: str, keep: Callable[[str], bool], state: str, verb: str
) -> list[str]:
    """:func:`job_targets`; of an array, only the members ``keep`` accepts (those ``state``),
    and a :class:`HoldRefused` when there are none."""
    targets = job_targets(ctl, job_id)
    if len(targets) > 1:
        targets = [t for t in targets if keep(t)]
        if not targets:
            raise HoldRefused(f"no member of array {job_id} is {state}: nothing to {verb}")
    return targets


def recovered(ctl: Controller, job_id: str, parent: str | None) -> bool:
    """Whether ``job_id`` (or its array) is a recovered submission not yet handed to the
    core (recovered array members come one by one, a fresh array as one submission)."""
    return any(
        isinstance(event, JobSubmitted) and event.job.id in (job_id, parent)
        for event in (*ctl.held, *ctl.waiting)
    )


def is_waiting(ctl: Controller, job_id: str) -> bool:
    """Queued or pending in the core, or not handed to it yet."""
    rec = ctl.core.jobs.get(job_id)
    return rec is None or rec.phase in (JobPhase.QUEUED, JobPhase.PENDING)
