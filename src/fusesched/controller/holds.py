"""Holding waiting jobs and releasing them (Slurm's ``scontrol hold`` / ``release``).

A held job stays ``Pending`` with phase ``held`` and the reason, and never starts until it is
released; then it queues again (``queued``, or ``pending`` while it still waits for its
dependencies). Only waiting jobs can be held: a running one is a :class:`HoldRefused`. The
hold is stored (phase ``held``, reason ``held: …``), so it outlives a controller restart: the
recovered job is handed to the core and held again before any scheduling cycle.

A hold a cluster-admin places is an *administrator hold* (Slurm's hold by root against the
user's own ``uhold``): only an administrator may release or replace it, anyone else gets a
:class:`HoldForbidden`. It is stored as the reason ``held by administrator: …``, which is how
a restarted controller knows it again (:func:`stored_admin`).

Every function here takes the controller's lock itself.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING

from fusesched.controller.records import UnknownJobError
from fusesched.controller.unsubmitted import Unsubmitted, submitted_ids
from fusesched.controller.unsubmitted import reason as wait_reason
from fusesched.model.events import JobHoldRequested, JobReleaseRequested
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.controller.service import Controller

#: the phase a held job is stored with (the core's phase stays ``pending``)
HELD = "held"
#: longest reason kept
MAX_REASON = 1_000
#: the reason of a job submitted held (``hold: true``, ``sbatch --hold``)
AT_SUBMIT = "submitted held"
#: the stored reason of a held job starts so: a user's hold, an administrator's
USER_PREFIX = "held: "
ADMIN_PREFIX = "held by administrator: "


class HoldRefused(ValueError):
    """A hold or release that cannot be done (the job runs or has ended); a 409."""


class HoldForbidden(PermissionError):
    """A hold or release of a job an administrator held, by someone who is not one; a 403."""


class Authority(Enum):
    """Who holds, releases or requeues: what it may do to an administrator's hold, and what
    kind of hold it places."""

    USER = "user"  # a user or tenant-admin: its holds are users', an administrator's is a 403
    ADMIN = "admin"  # a cluster-admin: its holds are administrator holds
    OPEN = "open"  # no authentication configured: may do everything, its holds are users'


def hold(ctl: Controller, job_id: str, reason: str, by: Authority = Authority.OPEN) -> list[str]:
    """Hold ``job_id`` (every waiting member of an array); the ids held. Holding a held job
    again replaces the reason; an administrator's hold only an administrator may replace (a
    :class:`HoldForbidden` for anyone else, and nothing changes)."""
    reason = " ".join(reason.split()) or "held by user"
    if len(reason) > MAX_REASON:
        raise HoldRefused(f"the reason is longer than {MAX_REASON:,} characters")
    now = ctl.clock()
    with ctl.work:
        targets = member_targets(ctl, job_id, lambda t: is_waiting(ctl, t), "waiting", "hold")
        _admin_held(ctl, targets, by, "change that hold")
        unsent = unsubmitted_ids(ctl)  # (read once, however many members)
        for target in targets:
            live = ctl.jobs[target]
            if target in ctl.core.jobs:
                try:
                    ctl.core.handle(JobHoldRequested(target, reason), now)
                except ValueError as exc:
                    raise HoldRefused(f"{exc} (cancel it instead)") from None
            elif not recovered(ctl, target, live.spec.array_parent, unsent):
                # submitted since the last cycle: held right after the core takes it
                ctl.events.append(JobHoldRequested(target, reason))
            # (a recovered job not yet handed to the core is held when it is: after_resubmit)
            if by is not Authority.OPEN or live.hold is None:
                live.hold_admin = by is Authority.ADMIN  # (OPEN keeps an administrator's)
            live.hold = reason
            ctl.persist.job_held(target, reason, HELD, now, by_admin=live.hold_admin)
        ctl.persist.flush()
    ctl.wake()
    return targets


def release(ctl: Controller, job_id: str, by: Authority = Authority.OPEN) -> list[str]:
    """Release ``job_id`` (every held member of an array); the ids released. Releasing a job
    that is not held changes nothing (and returns no id). An administrator's hold only an
    administrator may release (a :class:`HoldForbidden`, and no member is released)."""
    now = ctl.clock()
    with ctl.work:
        released = []
        targets = job_targets(ctl, job_id)
        _admin_held(ctl, targets, by, "release it")
        unsent = unsubmitted_ids(ctl)  # (read once, however many members)
        pending: Unsubmitted | None = None  # (what they may wait for: read once too)
        for target in targets:
            live = ctl.jobs[target]
            if live.hold is None:
                continue
            live.hold, live.hold_admin = None, False
            rec = ctl.core.jobs.get(target)
            phase = JobPhase.PENDING.value
            held_back = rec is None and recovered(ctl, target, live.spec.array_parent, unsent)
            if rec is not None:
                ctl.core.handle(JobReleaseRequested(target), now)
                phase = rec.phase.value
            elif not held_back:
                ctl.events.append(JobReleaseRequested(target))
            ctl.persist.job_held(target, None, phase, now, begin_time=live.spec.begin_time)
            if held_back and live.spec.dependencies:
                pending = pending or Unsubmitted(ctl, [*ctl.held, *ctl.waiting])
                _waits_after(ctl, pending, live.spec)
            released.append(target)
        ctl.persist.flush()
    ctl.wake()
    return released


def _waits_after(ctl: Controller, pending: Unsubmitted, spec: JobSpec) -> None:
    """A job released while it waits outside the core after a restart, behind a job it
    depends on that the core does not hold yet, says so as the other such jobs do
    (``Dependency: job N``: unsubmitted.hold_back), not ``released``."""
    target = pending.waits_for(spec)
    if target is not None:
        ctl.persist.job_reason(spec.id, wait_reason(target))
        ctl.persist.recovered_wait(spec.id)


def at_submit(ctl: Controller, job_ids: list[str]) -> list[JobHoldRequested]:
    """The holds of jobs submitted held (their stored phase is ``held`` already)."""
    for job_id in job_ids:
        ctl.jobs[job_id].hold = AT_SUBMIT
    return [JobHoldRequested(job_id, AT_SUBMIT) for job_id in job_ids]


def after_resubmit(ctl: Controller, job_id: str) -> list[JobHoldRequested]:
    """The holds to send the core right after a submission it gets late (recovered, or
    held back after a restart: controller/recovery.py): of the job, or of its array's
    members, those held now (placed or released meanwhile)."""
    if job_id in ctl.jobs:
        ids = [job_id]
    else:  # (an array submitted as one)
        ids = [j for j, live in ctl.jobs.items() if live.spec.array_parent == job_id]
    return [JobHoldRequested(j, hold) for j in ids if (hold := ctl.jobs[j].hold) is not None]


def stored_hold(phase: str, reason: str) -> str | None:
    """The hold of a stored pending job (None: not held)."""
    if phase != HELD:
        return None
    return reason.removeprefix(ADMIN_PREFIX if stored_admin(phase, reason) else USER_PREFIX)


def stored_admin(phase: str, reason: str) -> bool:
    """Whether a stored pending job's hold is an administrator's (a user's reason is stored
    after ``held: ``, so it cannot pass for one)."""
    return phase == HELD and reason.startswith(ADMIN_PREFIX)


def _admin_held(ctl: Controller, targets: list[str], by: Authority, verb: str) -> None:
    """A :class:`HoldForbidden` when ``by`` is a user and one of ``targets`` has an
    administrator's hold (checked before anything changes)."""
    if by is not Authority.USER:
        return
    for target in targets:
        live = ctl.jobs[target]
        if live.hold is not None and live.hold_admin:
            raise HoldForbidden(
                f"job {target} is held by an administrator ({live.hold}); ask an "
                f"administrator to {verb}"
            )


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
    if _ended_array(ctl, job_id):
        raise HoldRefused(f"job {job_id} has ended (every member of the array has)")
    raise UnknownJobError(job_id)


def _ended_array(ctl: Controller, job_id: str) -> bool:
    """Whether the store holds members of the array ``job_id`` (it has no row of its own: its
    first member holds its number, so this reads that one row by number)."""
    if not (job_id.isascii() and job_id.isdigit()) or len(job_id) > 18:
        return False
    rows = ctl.persist.list_jobs(limit=1, before_seq=int(job_id) + 1)
    return bool(rows) and rows[0].array_parent == job_id


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


def unsubmitted_ids(ctl: Controller) -> set[str]:
    """The ids of the submissions held back after a restart, not yet handed to the core
    (recovered, or behind a job they depend on: controller/recovery.py)."""
    return submitted_ids([*ctl.held, *ctl.waiting])


def recovered(
    ctl: Controller, job_id: str, parent: str | None, unsent: set[str] | None = None
) -> bool:
    """Whether ``job_id`` (or its array) is a submission held back after a restart, not yet
    handed to the core (recovered array members come one by one, a fresh array as one
    submission). ``unsent``: :func:`unsubmitted_ids`, read once for many jobs."""
    ids = unsubmitted_ids(ctl) if unsent is None else unsent
    return job_id in ids or (parent is not None and parent in ids)


def is_waiting(ctl: Controller, job_id: str) -> bool:
    """Queued or pending in the core, or not handed to it yet."""
    rec = ctl.core.jobs.get(job_id)
    return rec is None or rec.phase in (JobPhase.QUEUED, JobPhase.PENDING)
