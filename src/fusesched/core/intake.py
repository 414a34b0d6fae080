"""Job intake: a submitted job (or job array) is compiled, checked and queued — or waits for
its dependencies, or is rejected — and a job that has not started can be cancelled.

The functions take the core (``core``); :class:`~fusesched.core.scheduler.SchedulerCore` binds
those it exposes as methods in its class body, so a call costs what a method call costs.
Queued children of a throttled array (``max_parallel``) are held here until a slot frees up.
Pure, like the rest of the core.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from fusesched.core import array_deps, deadlines, reservations
from fusesched.core.records import JobRecord
from fusesched.model.events import Decision, RejectJob, StopJob
from fusesched.model.job import DependencyKind, JobSpec, QoS
from fusesched.model.licenses import refusal as license_refusal
from fusesched.model.phases import JobPhase
from fusesched.policies.queue_order import JobFacts

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore


#: Why a running job whose new time limit has already passed is stopped (the controller
#: reports its exit as timed out: the reason says "walltime", as the agents' do).
TIME_LIMIT_PASSED = "walltime exceeded"


class DuplicateJobId(ValueError):
    """A submitted job (or array child) reuses the id of a job the core already knows."""


#: ``QoS.rank`` looked up once per tier rather than computed per job.
QOS_RANK = {qos: qos.rank for qos in QoS}

# (module globals: cheaper to read than the enum's attributes)
PENDING, QUEUED = JobPhase.PENDING, JobPhase.QUEUED
SINGLETON, AFTER_CORR = DependencyKind.SINGLETON, DependencyKind.AFTER_CORR

#: ``JobFacts(*fields)`` without the Python-level ``__new__`` of a named tuple.
_facts = tuple.__new__


def submit(core: SchedulerCore, spec: JobSpec, now: float) -> list[Decision]:
    """A submitted job (or array): rejected, waiting for its dependencies, or queued."""
    if spec.array is not None and spec.array_index is None:
        return submit_array(core, spec, now)
    rec = register_job(core, spec, now)
    if rec.never_fits:
        return reject(core, rec, rec.never_fits, now)
    if spec.licenses:  # (an unknown license, or more than the cluster has)
        refused = license_refusal(core.config.licenses, spec.licenses)
        if refused:
            return reject(core, rec, refused, now)
    refused = core.tenants.refuse(spec) if core.tenants is not None else ""
    if refused:
        return reject(core, rec, refused, now)
    if spec.reservation is not None or core.bookings is not None:
        refused = reservations.admit(core, rec, now)  # (its nodes: docs/RESERVATIONS.md)
        if refused:
            return reject(core, rec, refused, now)
    if spec.dependencies:
        refused = wait_on_dependencies(core, rec)
        if refused:
            return reject(core, rec, refused, now)
    if not rec.waiting_on:
        enqueue(core, rec, now, "submitted")
    return []


def register_job(core: SchedulerCore, spec: JobSpec, now: float) -> JobRecord:
    """A new job's record (pending), compiled; its id must be new."""
    if spec.id in core.jobs:  # the shell must not reuse ids
        raise DuplicateJobId(f"job id {spec.id!r} is already in use")
    rec = compile_job(core, spec, now)
    if spec.begin_time is not None:
        rec.not_before = spec.begin_time  # waits for it: see enqueue
    if spec.deadline is not None:
        deadlines.watch(core, rec)  # removed if it has not started in time
    core.jobs[spec.id] = rec
    if spec.name:  # (for the singletons of its name and user: see namesakes)
        core._named.setdefault((spec.name, spec.user), []).append(spec.id)
    parent = spec.array_parent
    if parent is not None and spec.array is not None and parent not in core.arrays.specs:
        core.arrays.specs[parent] = spec.array  # (for dependencies on the whole array)
    return rec


def submit_array(core: SchedulerCore, spec: JobSpec, now: float) -> list[Decision]:
    """Every child of an array, submitted in index order (all ids checked first)."""
    children = spec.expand_array()
    taken = [child.id for child in children if child.id in core.jobs]
    if taken:  # refuse before touching any state
        raise DuplicateJobId(f"job id {taken[0]!r} is already in use")
    core.arrays.accounted.add(spec.id)  # (every member: see array_deps)
    out: list[Decision] = []
    for child in children:
        out.extend(submit(core, child, now))
    return out


def compile_job(core: SchedulerCore, spec: JobSpec, now: float) -> JobRecord:
    """The job's record, with its task groups in array form (compiled once per shape)."""
    core._seq += 1
    shape = core.shapes.shape_of(spec)
    if core.predictions is not None:
        estimate = core.predictions.estimate(spec)
    elif spec.walltime_s is not None:
        estimate = spec.walltime_s
    else:
        estimate = core.config.default_estimate_s
    facts = _facts(
        JobFacts, (spec.submit_time, estimate, shape.cpus, spec.priority, QOS_RANK[spec.qos])
    )
    rec = JobRecord(  # (by position: see the order of JobRecord's fields)
        spec,
        core._seq,
        PENDING,
        shape.groups,
        shape.total,
        shape.bound,
        estimate,
        facts,
        shape.never_fits,
        shape.number,
        shape.family,
        # an exclusive job's room is whole idle nodes, a data-aware one's depends on
        # where its data is: the column sum does not decide
        -1 if spec.placement.exclusive or spec.datasets else shape.single_column,
        shape.single_amount,
        shape.single_total,
    )
    if core.predictions is not None:
        core.predictions.watch(rec)  # re-predicted while it waits
    return rec


def enqueue(core: SchedulerCore, rec: JobRecord, now: float, reason: str) -> None:
    """Into the waiting queue (or held, when its array runs ``max_parallel`` children), or,
    before its begin time (``not_before``), among the delayed jobs until then."""
    if rec.not_before > now:
        wait_to_begin(core, rec, now, reason)
        return
    if rec.phase is not QUEUED:
        rec.move(QUEUED, now, reason)
    spec = rec.spec
    parent = spec.array_parent
    if parent and spec.array and spec.array.max_parallel is not None:
        if core._array_running.get(parent, 0) >= spec.array.max_parallel:
            core._array_held.setdefault(parent, []).append(rec)
            return
        core._array_running[parent] = core._array_running.get(parent, 0) + 1
    if not core.order.dynamic:
        rec.key = core.order.key(rec.facts, now)
    wait = core.config.data_locality_wait_s
    if spec.datasets and wait > 0:
        rec.data_wait_until = now + wait
        heapq.heappush(core._data_deadlines, (rec.data_wait_until, rec.id))
    core.queue.push(rec, now)
    core._fresh.append(rec)


def wait_to_begin(core: SchedulerCore, rec: JobRecord, now: float, reason: str) -> None:
    """A job not eligible before ``rec.not_before`` (its begin time, or a requeue's backoff)
    waits among the delayed jobs (queued, not yet in the queue) until a cycle at or after
    then (:meth:`SchedulerCore.next_wakeup` names that time)."""
    if rec.phase is not QUEUED:
        waits = "begin time" if rec.not_before == rec.spec.begin_time else "eligible at"
        booked = reservations.waits_for(core, rec) if rec.spec.reservation else ""
        rec.move(QUEUED, now, f"{reason}; {booked or f'{waits} {rec.not_before:g}'}")
    core._delayed[rec.id] = rec


def array_slot_freed(
    core: SchedulerCore, parent: str | None, now: float, hand_on: bool = True
) -> None:
    """A child of a throttled array left the queue or ended: admit the next held one
    (``hand_on`` False: not yet, the caller does: :func:`update`)."""
    if parent is None or parent not in core._array_running:
        return
    core._array_running[parent] -= 1
    if hand_on:
        _admit_held(core, parent, now)


def _admit_held(core: SchedulerCore, parent: str, now: float) -> None:
    """The next held child of throttled array ``parent`` takes a free slot."""
    held = core._array_held.get(parent)
    if held:
        nxt = held.pop(0)
        core._array_running[parent] += 1
        if not core.order.dynamic:
            nxt.key = core.order.key(nxt.facts, now)
        core.queue.push(nxt, now)
        core._fresh.append(nxt)


def reshape(core: SchedulerCore, rec: JobRecord, spec: JobSpec) -> None:
    shape = core.shapes.shape_of(spec)
    rec.spec = spec
    rec.groups, rec.total, rec.bound = shape.groups, shape.total, shape.bound
    rec.never_fits, rec.shape_id, rec.family = shape.never_fits, shape.number, shape.family
    single = -1 if spec.placement.exclusive or spec.datasets else shape.single_column
    rec.single_column, rec.single_amount = single, shape.single_amount
    rec.single_total = shape.single_total


def wait_on_dependencies(core: SchedulerCore, rec: JobRecord) -> str:
    """A new job waits on the jobs its dependencies name, those not met yet (a
    ``singleton``: on every earlier job of its name and user that has not ended; on an
    array's id: see :mod:`~fusesched.core.array_deps`). Returns why it can never start (an
    unknown job, a dependency that can never be met), or ``""``."""
    spec = rec.spec
    for dep in spec.dependencies:
        if dep.kind is SINGLETON:
            if not spec.name:
                return "a singleton dependency needs a job name"
            for other_id in namesakes(core, rec):
                wait_on(core, rec, other_id)
            continue
        other = core.jobs.get(dep.job_id)
        if other is None:  # an array's id, or no job at all
            found = array_deps.resolve(core, rec, dep)
            if found is None:
                return f"dependency on unknown job {dep.job_id!r}"
            target, refused = found
            if refused:
                return refused
            if target:
                wait_on(core, rec, target)
            continue
        if dep.kind.broken(other.phase):
            return never_met(dep.kind, other.id, other.phase, at_submit=True)
        if not dep.kind.met(other.phase):
            wait_on(core, rec, other.id)
    return ""


def namesakes(core: SchedulerCore, rec: JobRecord) -> list[str]:
    """The jobs a ``singleton`` waits on: those of the same name and user registered before
    it that have not ended — since the last singleton of the name, which itself waits on
    every earlier one (so each job is looked at once, and a singleton array's members wait
    one on the next, not each on all before it)."""
    key = (rec.spec.name, rec.spec.user)
    time, jobs = rec.spec.submit_time, core.jobs
    waits: list[str] = []
    kept: list[str] = []  # submitted after it (known first after a restart): not waited on
    for other in core._named.get(key, []):
        if other == rec.id or jobs[other].phase.terminal:
            continue
        (waits if jobs[other].spec.submit_time <= time else kept).append(other)
    core._named[key] = [*kept, rec.id]
    return waits


def wait_on(core: SchedulerCore, rec: JobRecord, other_id: str) -> None:
    """``rec`` waits on job ``other_id`` (once, however many dependencies name it)."""
    if other_id not in rec.waiting_on:
        rec.waiting_on.add(other_id)
        core._dependents.setdefault(other_id, []).append(rec.id)


def dependency_kinds(waiter: JobRecord, other: JobRecord) -> set[DependencyKind]:
    """The kinds of ``waiter``'s dependencies on ``other``; waiting on it as a ``singleton``
    (``other`` has the same name and user) counts as ``afterany``; an ``aftercorr`` on
    ``other``'s array counts when ``other`` has the waiter's index."""
    spec = waiter.spec
    kinds = {d.kind for d in spec.dependencies if d.job_id == other.id}
    parent = other.spec.array_parent
    if parent is not None and spec.array_index == other.spec.array_index:
        corr = [d for d in spec.dependencies if d.kind is AFTER_CORR and d.job_id == parent]
        kinds.update(d.kind for d in corr)
    if SINGLETON in {d.kind for d in spec.dependencies} and (
        (other.spec.name, other.spec.user) == (spec.name, spec.user)
    ):
        kinds.add(DependencyKind.AFTER_ANY)
    return kinds


def never_met(kind: DependencyKind, job_id: str, phase: JobPhase, at_submit: bool = False) -> str:
    """Why a dependency of ``kind`` on job ``job_id``, ended in ``phase``, can never be met."""
    if kind is DependencyKind.AFTER_NOT_OK:
        return f"dependency {job_id} completed: {kind} can never be met"
    if at_submit:
        return f"dependency {job_id} did not succeed"
    return f"dependency {job_id} ended {phase}"


def settle_dependents(core: SchedulerCore, rec: JobRecord, now: float) -> list[Decision]:
    """``rec`` ended: the jobs waiting on it stop waiting, or are rejected when it broke a
    dependency of theirs (``afterok`` on a failure, ``afternotok`` on a success). The
    member of an array others depend on is counted in its array's tally."""
    tallied = core.arrays.tallies and rec.spec.array_parent in core.arrays.tallies
    out = array_deps.member_ended(core, rec, now) if tallied else []
    waiting = core._dependents.pop(rec.spec.id, None)
    if waiting is None:
        return out
    phase = rec.phase
    for dep_id in waiting:
        dep = core.jobs[dep_id]
        if dep.phase is not JobPhase.PENDING:
            continue
        broken = [k for k in dependency_kinds(dep, rec) if k.broken(phase)]
        if broken:
            out.extend(reject(core, dep, never_met(min(broken), rec.id, phase), now))
            continue
        dep.waiting_on.discard(rec.id)
        if not dep.waiting_on and dep.held is None:
            enqueue(core, dep, now, f"dependencies met ({rec.id} {phase})")
    return out


def settle_started(core: SchedulerCore, rec: JobRecord, now: float) -> None:
    """``rec`` started: the jobs that waited only for its start (``after``) stop waiting on
    it; the others go on waiting for its end. Called after the cycle that started it (the
    jobs it lets go join the queue, and the cycle goes on with them)."""
    if core.arrays.tallies and rec.spec.array_parent in core.arrays.tallies:
        array_deps.member_started(core, rec, now)
    waiting = core._dependents.get(rec.id)
    if waiting is None:
        return
    still: list[str] = []
    for dep_id in waiting:
        dep = core.jobs[dep_id]
        if dep.phase is not JobPhase.PENDING:
            continue
        if not all(k.met(JobPhase.RUNNING) for k in dependency_kinds(dep, rec)):
            still.append(dep_id)
            continue
        dep.waiting_on.discard(rec.id)
        if not dep.waiting_on and dep.held is None:
            enqueue(core, dep, now, f"dependencies met ({rec.id} started)")
    if still:
        core._dependents[rec.id] = still
    else:
        del core._dependents[rec.id]


def hold(core: SchedulerCore, job_id: str, reason: str, now: float) -> list[Decision]:
    """Keep a waiting job from starting (:class:`JobHoldRequested`); holding a held job again
    replaces the reason."""
    rec = core.jobs.get(job_id)
    if rec is None:
        raise KeyError(f"unknown job {job_id!r}")
    if rec.phase not in (JobPhase.QUEUED, JobPhase.PENDING):
        raise ValueError(f"job {job_id} is {rec.phase}: only a waiting job can be held")
    if rec.phase is JobPhase.QUEUED:
        dequeue(core, rec, now, leaves=False)
        if core.tenants is not None:
            core.tenants.held(rec.id)  # no reclaim for it while held; its back-off goes on
        rec.move(JobPhase.PENDING, now, f"held: {reason}")
        core._changed = True
    rec.held = reason
    return []


def back_in_line(core: SchedulerCore, rec: JobRecord, now: float, reason: str) -> None:
    """A waiting job taken out of the queue goes back: to wait out a requeue's backoff first
    when it has one left (``not_before``), else into the queue."""
    core._changed = True
    enqueue(core, rec, now, reason)  # (waits out ``not_before`` first: see wait_to_begin)


def release(core: SchedulerCore, job_id: str, now: float) -> list[Decision]:
    """Let a held job start again (:class:`JobReleaseRequested`); releasing a job that is
    not held changes nothing."""
    rec = core.jobs.get(job_id)
    if rec is None:
        raise KeyError(f"unknown job {job_id!r}")
    if rec.held is None:
        return []
    rec.held = None
    if rec.phase is JobPhase.PENDING and not rec.waiting_on:
        back_in_line(core, rec, now, "released")
    return []


def cancel(core: SchedulerCore, job_id: str, reason: str, now: float) -> list[Decision]:
    rec = core.jobs.get(job_id)
    if rec is None:
        raise KeyError(f"unknown job {job_id!r}")
    if rec.phase is JobPhase.RUNNING:
        rec.stop_requested = reason
        return [StopJob(job_id, reason)]
    if rec.phase is JobPhase.QUEUED:
        dequeue(core, rec, now)
        core._changed = True
    if rec.phase.terminal:
        return []
    if rec.phase is JobPhase.PENDING and core.tenants is not None:
        core.tenants.dequeued(rec.id)  # (a held job keeps its borrowing back-off until now)
    _stand_down(core, rec, now)
    rec.move(JobPhase.CANCELLED, now, reason)
    if core.predictions is not None:
        core.predictions.ended(rec)  # (never ran: forgotten, nothing learned)
    return settle_dependents(core, rec, now)


def dequeue(
    core: SchedulerCore, rec: JobRecord, now: float, leaves: bool = True, hand_on: bool = True
) -> None:
    """Take a queued job out of the queue (or out of where it waits: its requeue's backoff,
    its quota, its array's throttle). ``leaves``: it will not come back (cancelled), so the
    tenancy gate forgets it — its reclaim and its borrowing back-off. A job re-ordered by an
    update keeps both; a held one keeps its back-off (:func:`hold` ends its reclaim).
    ``hand_on`` False: the slot of its throttled array that it frees is not handed to the
    next held child yet (an update's job may take it back: :func:`update`)."""
    if leaves and core.tenants is not None:
        core.tenants.dequeued(rec.id)
    if core._delayed.pop(rec.id, None) is not None:
        return
    if core._parked.pop(rec.id, None) is not None:
        array_slot_freed(core, rec.spec.array_parent, now, hand_on)
        return
    parent = rec.spec.array_parent
    held = core._array_held.get(parent or "")
    if held and rec in held:
        held.remove(rec)
        return
    core.queue.remove(rec)
    array_slot_freed(core, parent, now, hand_on)


def reject(core: SchedulerCore, rec: JobRecord, reason: str, now: float) -> list[Decision]:
    core.stats.rejected += 1
    _stand_down(core, rec, now)
    rec.move(JobPhase.CANCELLED, now, f"rejected: {reason}")
    if core.predictions is not None:
        core.predictions.ended(rec)
    return [RejectJob(rec.id, reason), *settle_dependents(core, rec, now)]


def _stand_down(core: SchedulerCore, rec: JobRecord, now: float) -> None:
    """``rec`` ends without running: as a waiting ``singleton`` it stood for the earlier
    jobs of its name (:func:`namesakes`), which go back to the later singletons
    (:func:`fusesched.core.job_rewire.unwait`): none of them runs beside one of those."""
    if rec.waiting_on and any(d.kind is SINGLETON for d in rec.spec.dependencies):
        from fusesched.core import job_rewire

        job_rewire.unwait(core, rec, now)
