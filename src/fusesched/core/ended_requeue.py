"""Requeueing an ended job on request (Slurm's ``scontrol requeue`` of a finished batch job):
a completed, failed, cancelled or timed-out job runs again under its id.

The transition is explicit (``completed | failed | cancelled | timeout → queued``, or
``→ pending`` for a job that never started and waits for its dependencies again) and is
recorded with its reason, after the job's earlier story. The job counts one attempt more; its
run's fields (start, end, nodes, exit code) are cleared. A job that ran had its dependencies
met and does not wait on them again (Slurm shows none once met); one that never started
(cancelled or rejected while it waited) waits on them again as a new submission does, and a
dependency that can no longer be met refuses the requeue. What refuses a submission (it can
never fit, an unknown license, queue or QoS, a reservation it may not use) refuses the
requeue too, as does ``JobSpec.requeue`` False (``sbatch --no-requeue``): a ``ValueError``,
with nothing changed but the reservation's constraints. A core that no longer holds the job
(the shell restarted since it ended) takes it as a new record. A member of an array that
others depend on counts as not ended again in its array's tally
(:func:`array_deps.member_requeued`), so that its rerun's start and end count. Pure, like the
rest of the core.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusesched.core import array_deps, deadlines, intake, reservations
from fusesched.core.records import JobRecord
from fusesched.model.events import Decision, EndedJobRequeueRequested
from fusesched.model.job import JobSpec
from fusesched.model.licenses import refusal as license_refusal
from fusesched.model.phases import JobPhase
from fusesched.policies.queue_order import JobFacts

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

#: What the error of a job that may not be requeued says (Slurm: "Requested operation is
#: presently disabled").
NO_REQUEUE = "may not be requeued (requeue: false; sbatch --no-requeue)"


def requeue_ended(
    core: SchedulerCore, event: EndedJobRequeueRequested, now: float
) -> list[Decision]:
    """Queue the ended job ``event.job`` again (see the module's docstring)."""
    spec = event.job
    rec = core.jobs.get(spec.id)
    if rec is not None and not rec.phase.terminal:
        raise ValueError(f"job {spec.id} is {rec.phase}: it has not ended")
    if not spec.requeue:
        raise ValueError(f"job {spec.id} {NO_REQUEUE}")
    refused = _refusal(core, spec)
    if refused:
        raise ValueError(f"job {spec.id} cannot be requeued: {refused}")
    reason = f"requeued ({event.reason})"
    ran = rec is not None and rec.start_time is not None  # (a new record: see the shell)
    if not ran:
        broken = _broken_dependency(core, spec)
        if broken:
            raise ValueError(f"job {spec.id} cannot be requeued: {broken}")
    if rec is None:  # (the shell restarted since it ended): a new record, pending
        rec = intake.register_job(core, spec, now)
    else:
        _reopen(core, rec, spec)
    if not ran and spec.dependencies:
        broken = intake.wait_on_dependencies(core, rec)
        if broken:
            _refused(core, rec, now, broken)
    if spec.reservation is not None or core.bookings is not None or rec.booked is not None:
        gone = reservations.requeued(core, rec, now)
        if gone:
            _refused(core, rec, now, gone)
        rec.not_before = max(rec.not_before, reservations.opens(core, rec))
    if spec.array_parent is not None:  # (it counts as unended in its array's tally again)
        array_deps.member_requeued(core, rec)
    rec.attempts += 1
    core._changed = True
    if rec.waiting_on:
        if rec.phase is not JobPhase.PENDING:
            rec.move(JobPhase.PENDING, now, f"{reason}; waits for its dependencies")
        return []
    if rec.phase is not JobPhase.PENDING:  # (a new record is pending: enqueue moves it)
        rec.move(JobPhase.QUEUED, now, reason)  # the explicit transition out of its end
    intake.enqueue(core, rec, now, reason)  # (or delayed until ``not_before``)
    return []


def _broken_dependency(core: SchedulerCore, spec: JobSpec) -> str:
    """Why a dependency of ``spec`` on a job the core holds can no longer be met, or ``""``
    (checked before anything changes; :func:`intake.wait_on_dependencies` checks the rest)."""
    for dep in spec.dependencies:
        other = core.jobs.get(dep.job_id)
        if other is not None and dep.kind.broken(other.phase):
            return intake.never_met(dep.kind, other.id, other.phase)
    return ""


def _refusal(core: SchedulerCore, spec: JobSpec) -> str:
    """Why ``spec`` could not be submitted now (as :func:`intake.submit` checks), or ``""``."""
    never = core.shapes.shape_of(spec).never_fits
    if never:
        return never
    if spec.licenses:
        refused = license_refusal(core.config.licenses, spec.licenses)
        if refused:
            return refused
    return core.tenants.refuse(spec) if core.tenants is not None else ""


def _reopen(core: SchedulerCore, rec: JobRecord, spec: JobSpec) -> None:
    """An ended record made ready to wait again: its run forgotten, ``spec`` its spec now."""
    core.reshape(rec, spec)
    rec.base_spec, rec.flavour_key = None, ()
    rec.start_time = rec.est_end = rec.end_time = None
    rec.allocation = None
    rec.exit_code = None
    rec.stop_requested = rec.preempt_reason = None
    rec.held = None
    rec.admission = rec.parked_by = None
    rec.waiting_on = set()
    rec.not_before = spec.begin_time or 0.0
    rec.data_wait_until = 0.0
    shape = core.shapes.shape_of(spec)
    rec.facts = JobFacts(
        spec.submit_time, rec.estimate, shape.cpus, spec.priority, intake.QOS_RANK[spec.qos]
    )
    if spec.deadline is not None:
        deadlines.watch(core, rec)
    if core.predictions is not None:
        core.predictions.watch(rec)


def _unwait(core: SchedulerCore, rec: JobRecord) -> None:
    """Undo :func:`intake.wait_on_dependencies` for a refused requeue."""
    for other in rec.waiting_on:
        waiting = core._dependents.get(other)
        if waiting is not None and rec.id in waiting:
            waiting.remove(rec.id)
            if not waiting:
                del core._dependents[other]
    rec.waiting_on = set()


def _refused(core: SchedulerCore, rec: JobRecord, now: float, why: str) -> None:
    """A requeue refused once under way (rare: a dependency on an array that can no longer
    be met, a reservation gone): what it waited on is undone, a record made anew ends
    cancelled (an ended one keeps its phase), and the ``ValueError`` says why."""
    _unwait(core, rec)
    if rec.phase is JobPhase.PENDING:
        rec.move(JobPhase.CANCELLED, now, f"not requeued: {why}")
    if core.predictions is not None:
        core.predictions.ended(rec)
    raise ValueError(f"job {rec.id} cannot be requeued: {why}")
