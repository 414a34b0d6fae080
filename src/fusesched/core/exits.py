"""Exits and release: a running job ends (completed, failed, timed out, cancelled or
requeued), its resources go back to the cluster, and what waited on it moves on.

The functions take the core (``core``); :class:`~fusesched.core.scheduler.SchedulerCore` binds
those it exposes as methods in its class body, so a call costs what a method call costs.
Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from fusesched.core.completing import hold
from fusesched.core.intake import array_slot_freed, settle_dependents
from fusesched.core.records import JobRecord
from fusesched.core.requeue import requeue
from fusesched.model.events import Decision, JobExited
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

# (module globals: cheaper to read than the enum's attributes)
RUNNING, QUEUED, COMPLETED = JobPhase.RUNNING, JobPhase.QUEUED, JobPhase.COMPLETED


def exited(core: SchedulerCore, event: JobExited, now: float) -> list[Decision]:
    """A running job ended: released, moved to its end phase (or requeued). One the OOM
    killer killed in (``out_of_memory``) fails even when it exited 0."""
    rec = core.jobs.get(event.job_id)
    if rec is None or rec.phase is not RUNNING:
        raise KeyError(f"job {event.job_id!r} is not running")
    release(core, rec, now, event.completing)
    rec.exit_code = event.exit_code
    if rec.stop_requested:
        rec.move(JobPhase.CANCELLED, now, rec.stop_requested)
    elif event.timed_out:
        rec.move(JobPhase.TIMEOUT, now, event.reason or "walltime exceeded")
    elif event.exit_code == 0 and not event.out_of_memory:
        rec.move(COMPLETED, now, event.reason or "exit 0")
    elif rec.preempt_reason is not None or event.requeue:
        return requeue(core, rec, event, now)
    else:
        rec.move(JobPhase.FAILED, now, event.reason or f"exit {event.exit_code}")
    if core.predictions is not None and core.predictions.ended(rec):
        repredict(core, rec.spec.user, now)
    # (no job waits on any other in most workloads: then there is nothing to settle)
    return settle_dependents(core, rec, now) if core._dependents or core.arrays.tallies else []


def repredict(core: SchedulerCore, user: str, now: float) -> None:
    """``user``'s history grew: predict their waiting jobs again; a changed estimate
    moves the job's queue row (and, in a static order, its place), and the head's
    reservation is recomputed."""
    assert core.predictions is not None
    changed = core.predictions.repredict(user)
    if changed:
        for rec in changed:
            if rec.phase is QUEUED:  # (parked, delayed or held jobs are keyed when queued)
                core.queue.reestimate(rec, now)
        core._changed = True
        core.reservation = None


def release(
    core: SchedulerCore, rec: JobRecord, now: float, completing: Collection[str] = ()
) -> None:
    """Give a running job's nodes, devices and quota back; what it booked on ``completing``
    (nodes where processes of it still live) stays held (core/completing.py)."""
    assert rec.allocation is not None and rec.est_end is not None
    alloc = rec.allocation
    if completing:
        hold(core, rec.spec.id, alloc, completing, now)
    elif alloc.column_amounts is not None and alloc.rows is None:
        core.cluster.give_column(alloc.nodes, alloc.column, alloc.column_amounts, alloc.total)
    else:
        core.cluster.give(alloc.nodes, alloc.amounts, unique=alloc.unique, total=alloc.total)
    if alloc.devices and not completing:
        for devices in alloc.devices:
            if devices is not None:
                core.devices.release(devices)
    spec = rec.spec
    core.running.remove(spec.id)
    if core.tenants is not None:  # (a victim's room: free once nothing of it is held)
        core.tenants.release(rec, now, held=bool(completing) and spec.id in core.completing)
    if core.licenses is not None:
        core.licenses.give(spec.id)
    core._changed = True
    rec.end_time = now
    if spec.array_parent is not None:
        array_slot_freed(core, spec.array_parent, now)
