"""Requeue: a run ended by preemption or by a failure the shell retries goes back to the
queue (``running → preempted → queued`` or ``running → queued``), off the nodes the shell
excludes and not before its backoff ends. A job that may not be requeued (``JobSpec.requeue``
False: ``sbatch --no-requeue``) ends instead: cancelled when preempted (``running →
preempted → cancelled``, as Slurm cancels it), failed when the shell asked for a requeue.
Pure, like the rest of the core."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from fusesched.core import deadlines, reservations
from fusesched.core.records import JobRecord
from fusesched.model.events import Decision, JobExited
from fusesched.model.job import JobSpec, LabelOp, LabelRequirement
from fusesched.model.node import LABEL_HOSTNAME
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

#: What the reason of a job that may not be requeued says when it ends instead.
NOT_REQUEUED: Final = "not requeued (--no-requeue)"


def requeue(core: SchedulerCore, rec: JobRecord, event: JobExited, now: float) -> list[Decision]:
    """A run ended by preemption or by a failure the shell retries: back to the queue
    (``running → preempted → queued``), off the excluded nodes, after the backoff."""
    rec.attempts += 1
    reason = rec.preempt_reason
    rec.preempt_reason = None
    if reason is not None:
        rec.preemptions += 1
        rec.move(JobPhase.PREEMPTED, now, reason)
        if not rec.spec.requeue:
            if core.tenants is not None:
                core.tenants.dequeued(rec.id)  # (it will not borrow again: no back-off)
            rec.move(JobPhase.CANCELLED, now, f"{reason}; {NOT_REQUEUED}")
            return core._settle_dependents(rec, now)
        budget = core.tenants.policy.max_preemptions if core.tenants is not None else 0
        if rec.preemptions > budget:
            why = f"preempted {rec.preemptions} times; the retry budget of {budget} is spent"
            rec.move(JobPhase.CANCELLED, now, why)
            return core._settle_dependents(rec, now)
    else:
        reason = event.reason or f"exit {event.exit_code}"
        if not rec.spec.requeue:  # (the shell ends such a job itself: see failures.py)
            rec.move(JobPhase.FAILED, now, f"{reason}; {NOT_REQUEUED}")
            return core._settle_dependents(rec, now)
    if event.exclude_nodes:
        exclude(core, rec, event.exclude_nodes)
        if rec.booked is not None:  # (the nodes a reservation keeps it off do not count)
            reservations.fits_anyway(core, rec)
        if rec.never_fits:
            return core._reject(rec, f"{rec.never_fits} (after excluding failed nodes)", now)
    if core.bookings is not None or rec.booked is not None or rec.spec.reservation:
        gone = reservations.requeued(core, rec, now)  # (its reservations' constraints now)
        if gone:
            return core._reject(rec, gone, now)
    # (not before its reservation's start: it may have been moved later since it started)
    rec.not_before = max(event.not_before, reservations.opens(core, rec))
    if rec.spec.deadline is not None:
        deadlines.watch(core, rec)  # waiting again: removed if it cannot start in time
    if rec.not_before > now:
        rec.move(JobPhase.QUEUED, now, f"requeued ({reason}); eligible at {rec.not_before:g}")
        core._delayed[rec.id] = rec
        return []
    core._enqueue(rec, now, f"requeued ({reason})")
    return []


def exclude(core: SchedulerCore, rec: JobRecord, nodes: Iterable[str]) -> None:
    """Recompile ``rec`` so that it never lands on ``nodes`` again."""
    avoid = LabelRequirement(LABEL_HOSTNAME, LabelOp.IN, tuple(sorted(set(nodes))))

    def without(spec: JobSpec) -> JobSpec:
        anti = (*spec.placement.anti_affinity, avoid)
        return replace(spec, placement=replace(spec.placement, anti_affinity=anti))

    if rec.base_spec is not None:
        rec.base_spec = without(rec.base_spec)
        rec.flavour_key = ()
    core.reshape(rec, without(rec.spec))
