"""A job's change on request (Slurm's ``scontrol update``, :class:`JobUpdateRequested`): a
waiting job takes its new priority, QoS, time limit, name, comment, queue, dependencies or
begin time, and its new place — in the queue, behind its dependencies or its begin time, a
throttled array's member in its own place (:func:`update`); a running job its new time
limit, name or comment (:func:`relimit`). Dependencies and names are rewired in
:mod:`fusesched.core.job_rewire`. Pure, like the rest of the core.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from fusesched.core import deadlines, reservations
from fusesched.core.intake import (
    QOS_RANK,
    TIME_LIMIT_PASSED,
    _admit_held,
    _facts,
    back_in_line,
    dequeue,
    reshape,
    wait_on_dependencies,
)
from fusesched.core.records import JobRecord
from fusesched.model.events import Decision, JobUpdateRequested, StopJob
from fusesched.model.phases import JobPhase
from fusesched.policies.queue_order import JobFacts

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore


def update(core: SchedulerCore, event: JobUpdateRequested, now: float) -> list[Decision]:
    """A job's change (:class:`JobUpdateRequested`): a waiting job takes its new place — in
    the queue, among the jobs waiting for their begin time, or waiting on its new
    dependencies (:mod:`~fusesched.core.job_rewire`); a running one its new time limit and
    name (:func:`relimit`). A change the job could not have been submitted with is a
    ``ValueError`` that changes nothing. A child of a throttled array keeps its slot, or its
    place among the held children (:func:`_throttle_back`)."""
    rec = core.jobs.get(event.job_id)
    if rec is None:
        raise KeyError(f"unknown job {event.job_id!r}")
    if rec.phase is JobPhase.RUNNING:
        return relimit(core, rec, event, now)
    if rec.phase not in (JobPhase.QUEUED, JobPhase.PENDING):
        raise ValueError(
            f"job {event.job_id} is {rec.phase}: only a waiting or running job can be changed"
        )
    changes = _changes(event)
    if changes.get("queue") == rec.spec.queue and "placement" not in changes:
        del changes["queue"]  # (its own queue named again: no move)
    if not changes:
        return []
    from fusesched.core import job_rewire

    old = rec.spec
    spec = replace(old, **changes)  # type: ignore[arg-type]
    rewire = "dependencies" in changes or spec.name != old.name
    moved = "queue" in changes or "placement" in changes
    base = rec.base_spec
    if moved and base is not None:  # (built again from the spec before its flavours' terms)
        spec = replace(base, **changes)  # type: ignore[arg-type]
    refused = core.tenants.refuse(spec) if "queue" in changes and core.tenants else ""
    if not refused and "placement" in changes:
        refused = core.shapes.shape_of(spec).never_fits
    if not refused and rewire:
        refused = job_rewire.dependency_refusal(core, spec, rec)
        refused = refused or job_rewire.rename_refusal(core, spec, rec)
    if refused:
        raise ValueError(f"job {rec.id}: {refused}")
    queued = rec.phase is JobPhase.QUEUED
    place = _throttle_place(core, rec) if queued else None
    if queued:  # (re-ordered only, it keeps its reclaim and its borrowing back-off)
        dequeue(core, rec, now, leaves=moved, hand_on=False)  # (see _throttle_back)
        if core.blocked_head is rec:  # (when it comes back, it is tried again)
            core.blocked_head = None
    elif moved and core.tenants is not None:  # (another queue: what it had in this one goes)
        core.tenants.dequeued(rec.id)
    if rewire:
        job_rewire.unwait(core, rec, now)
    if moved:  # recompiled; its quota flavours' and reservations' terms are made anew
        rec.base_spec = spec if base is not None else None
        rec.flavour_key = ()
        if "placement" in changes:
            rec.booked = None  # (the new placement has none: refresh_job adds them again)
        reshape(core, rec, spec)
        if rec.booked is not None:  # (the nodes a reservation keeps it off do not count)
            reservations.fits_anyway(core, rec)
    else:
        rec.spec = spec
        if rec.base_spec is not None:  # quota flavours rebuild ``spec`` from it: change it too
            rec.base_spec = replace(rec.base_spec, **changes)  # type: ignore[arg-type]
    if spec.name != old.name:
        job_rewire.renamed(core, rec, old.name, now)
    if rewire:
        refused = wait_on_dependencies(core, rec)
        if refused:  # (dependency_refusal says it first: not reached)
            raise ValueError(f"job {rec.id}: {refused}")
    if "begin_time" in changes:
        _new_begin(core, rec, old.begin_time)
    if spec.deadline is not None and event.walltime_s is not None:
        deadlines.watch(core, rec)  # (a longer limit: an earlier latest start)
    if core.predictions is None:
        rec.estimate = spec.walltime_s if spec.walltime_s is not None else rec.estimate
    facts = (spec.submit_time, rec.estimate, rec.facts[2], spec.priority, QOS_RANK[spec.qos])
    rec.facts = _facts(JobFacts, facts)
    core._changed = True
    if rec.waiting_on or rec.held is not None:
        if queued:  # it waits on its new dependencies
            if core.tenants is not None:
                core.tenants.held(rec.id)
            rec.move(JobPhase.PENDING, now, "updated: waits for its dependencies")
    else:  # queued again, or its dependencies are gone: into the queue (or its begin time)
        back_in_line(core, rec, now, "updated")
    if place is not None:
        _throttle_back(core, rec, place, now)
    return []


def _throttle_place(core: SchedulerCore, rec: JobRecord) -> int | None:
    """Where queued ``rec``, a child of a throttled array, stands in its array's throttle:
    -1 holding one of its slots (queued, or parked by its quota), else its place among the
    held children; None when it is no such child, or waits for its begin time."""
    spec = rec.spec
    parent, array = spec.array_parent, spec.array
    if parent is None or array is None or array.max_parallel is None or rec.id in core._delayed:
        return None
    for k, other in enumerate(core._array_held.get(parent, ())):
        if other is rec:
            return k
    return -1


def _throttle_back(core: SchedulerCore, rec: JobRecord, place: int, now: float) -> None:
    """``rec``, taken out of its array's throttle at ``place`` (:func:`_throttle_place`) by
    an update, is back where it was: held at its place again, or in the slot it held (an
    update re-orders the queue, not the array's children). A slot it no longer holds (it
    waits on dependencies or for its begin time now) goes to the next held child."""
    parent, array = rec.spec.array_parent, rec.spec.array
    assert parent is not None and array is not None and array.max_parallel is not None
    held = core._array_held.get(parent)
    if held and place >= 0 and held[-1] is rec:
        held.insert(place, held.pop())
    while held and core._array_running.get(parent, 0) < array.max_parallel:
        _admit_held(core, parent, now)


def _changes(event: JobUpdateRequested) -> dict[str, object]:
    """The spec's fields ``event`` changes, by name."""
    fields = (
        ("priority", event.priority),
        ("qos", event.qos),
        ("walltime_s", event.walltime_s),
        ("name", event.name),
        ("queue", event.queue),
        ("dependencies", event.dependencies),
        ("begin_time", event.begin_time),
        ("placement", event.placement),
    )
    return {name: value for name, value in fields if value is not None}


def _new_begin(core: SchedulerCore, rec: JobRecord, old: float | None) -> None:
    """``rec`` has a new begin time: not eligible before it, nor before its reservation's
    window, nor before what is left of a requeue's back-off (a ``not_before`` that neither
    its old begin time nor its reservation set)."""
    opens = reservations.opens(core, rec)
    backoff = rec.not_before if rec.not_before not in (old or 0.0, opens) else 0.0
    rec.not_before = max(rec.spec.begin_time or 0.0, opens, backoff)


def relimit(
    core: SchedulerCore, rec: JobRecord, event: JobUpdateRequested, now: float
) -> list[Decision]:
    """A running job's new time limit (Slurm's ``scontrol update TimeLimit``): its estimated
    end moves with it, so the reservations that backfilling makes see the new end. A limit
    already passed (start + limit <= ``now``) stops the job at once, as timed out. Only the
    time limit and the name of a running job may change (``ValueError`` for the rest; its
    own partition named again is no change, as in Slurm)."""
    waiting_only = [
        what
        for what, value in (
            ("priority", event.priority),
            ("QoS", event.qos),
            ("partition", event.queue if event.queue != rec.spec.queue else None),
            ("dependencies", event.dependencies),
            ("begin time", event.begin_time),
            ("placement", event.placement),
        )
        if value is not None
    ]
    if waiting_only:
        raise ValueError(
            f"job {rec.id} is running: its {', '.join(waiting_only)} cannot change (only a "
            "waiting job can be changed in priority, QoS, partition, dependencies or begin "
            "time; a running job only in its time limit, name and comment)"
        )
    if event.name is not None and event.name != rec.spec.name:
        from fusesched.core import job_rewire

        old = rec.spec.name
        rec.spec = replace(rec.spec, name=event.name)
        if rec.base_spec is not None:
            rec.base_spec = replace(rec.base_spec, name=event.name)
        job_rewire.renamed(core, rec, old, now)
    walltime = event.walltime_s
    if walltime is None:
        return []
    start, est_end = rec.start_time, rec.est_end
    assert start is not None and est_end is not None  # (a running job has both)
    old_end = start + rec.spec.walltime_s if rec.spec.walltime_s is not None else None
    rec.spec = replace(rec.spec, walltime_s=walltime)
    if rec.base_spec is not None:
        rec.base_spec = replace(rec.base_spec, walltime_s=walltime)
    new_end = start + walltime
    if new_end <= now:  # the new limit has passed: timed out now
        end = now
    elif core.predictions is None or est_end > new_end or est_end == old_end:
        # the request is the estimate (no prediction, a prediction past the new limit, or
        # one already corrected up to the old limit): the new limit is the new end
        end = new_end
    else:
        end = est_end  # a prediction below both limits: corrected, when due, up to the new
    if end != est_end:
        rec.est_end = end
        rec.estimate = end - start
        rec.facts = rec.facts._replace(estimate=rec.estimate)
        core.running.reestimate(rec.id, end)
        core._changed = True  # the head's reservation moves
        core.reservation = None
    if new_end <= now:
        return [StopJob(rec.id, f"{TIME_LIMIT_PASSED} (time limit changed to {walltime:g} s)")]
    return []
