"""What a waiting job waits on when an update changes its dependencies or its name (Slurm's
``scontrol update JobId=… Dependency=…`` / ``Name=…``; :func:`fusesched.core.job_update.update`).

* :func:`dependency_refusal` says, changing nothing, why a job could not wait on the
  dependencies it is given (the reasons a submission with them is rejected for: an unknown
  job, one that can never be met, a ``singleton`` without a name) — and, as Slurm's, one on
  itself or one that closes a circle of jobs waiting on each other.
* :func:`unwait` drops what a job waits on, so that :func:`fusesched.core.intake.
  wait_on_dependencies` can make it wait on its new dependencies.
* :func:`rename_refusal` says, changing nothing, why a job may not take a name (a
  ``singleton`` of that name that would wait on it is one it waits on).
* :func:`renamed` follows a job's new name: the ``singleton`` jobs of its old name stop
  waiting on it, those of its new name submitted after it wait on it too.

A ``singleton`` waits on the earlier jobs of its name and user; the last one registered
stands for the ones before it in ``core._named`` (:func:`~fusesched.core.intake.namesakes`).
One that stops being a singleton of that name puts back the jobs it stood for.
Pure, like the rest of the core.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from fusesched.core import array_deps
from fusesched.core.dependency_circles import reached, would_wait_on
from fusesched.core.intake import dependency_kinds, dequeue, enqueue, never_met, wait_on
from fusesched.model.job import DependencyKind, JobSpec
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.core.records import JobRecord
    from fusesched.core.scheduler import SchedulerCore

SINGLETON = DependencyKind.SINGLETON
WAITING = (JobPhase.QUEUED, JobPhase.PENDING)


def dependency_refusal(
    core: SchedulerCore,
    spec: JobSpec,
    rec: JobRecord | None,
    coming: Mapping[str, JobSpec] = MappingProxyType({}),
) -> str:
    """Why job ``spec`` could not wait on its dependencies, or ``""``; nothing changes.
    ``rec``: its record (None: the core does not hold it yet). ``coming``: the jobs the
    core is to take before it is told of the change (a shell's submissions since its last
    step), by id (an array by its own): they count as waiting jobs."""
    own = {spec.id, spec.array_parent} - {None}
    for dep in spec.dependencies:
        if dep.kind is SINGLETON:
            if not spec.name:
                return "a singleton dependency needs a job name"
            continue
        if dep.job_id in own:
            itself = "itself" if dep.job_id == spec.id else "its own array"
            return f"job {spec.id} cannot depend on {itself}"
        if _coming(coming, dep.job_id) is not None:
            continue
        other = core.jobs.get(dep.job_id)
        if other is not None:
            if dep.kind.broken(other.phase):
                return never_met(dep.kind, other.id, other.phase, at_submit=True)
            continue
        if dep.job_id not in core.arrays.specs:
            return f"dependency on unknown job {dep.job_id!r}"
        if rec is not None:
            found = array_deps.resolve(core, rec, dep)
            if found is not None and found[1]:
                return found[1]
    return _circle(core, spec, coming)


def rename_refusal(core: SchedulerCore, spec: JobSpec, rec: JobRecord | None) -> str:
    """Why waiting job ``rec`` may not take ``spec``'s name, or ``""``: a ``singleton`` of
    that name submitted after it, which would wait for it, is one it waits for (at some
    remove: a circle)."""
    if rec is None or not spec.name or spec.name == rec.spec.name:
        return ""
    later = {r.id for r in _later_singletons(core, (spec.name, spec.user), rec)}
    found = reached(core, would_wait_on(core, spec), later) if later else None
    if found is None:
        return ""
    job_id = found[0]
    return (
        f"circular dependency: job {job_id}, a singleton of the name {spec.name!r} "
        f"submitted after job {spec.id}, would wait on it, and it waits on job {job_id}"
    )


def _coming(coming: Mapping[str, JobSpec], job_id: str) -> JobSpec | None:
    """The spec in ``coming`` of ``job_id`` (or of the array it is a member of)."""
    if not coming:
        return None
    return coming.get(job_id) or coming.get(job_id.rpartition("_")[0])


def _circle(core: SchedulerCore, spec: JobSpec, coming: Mapping[str, JobSpec]) -> str:
    """Why ``spec``'s dependencies would close a circle (a job it would wait on waits, at
    some remove, on it, or on its array), or ``""`` (:mod:`~fusesched.core.
    dependency_circles`: through arrays, ``aftercorr`` partners and ``singleton`` names)."""
    mine = {spec.id} if spec.array_parent is None else {spec.id, spec.array_parent}
    found = reached(core, would_wait_on(core, spec), mine, coming)
    if found is None:
        return ""
    return f"circular dependency: job {found[1] or found[0]} waits on job {spec.id}"


def unwait(core: SchedulerCore, rec: JobRecord, now: float) -> None:
    """``rec`` waits on nothing any more (its dependencies or its name about to change).
    The earlier jobs of its name that it stood for as a ``singleton`` go back to
    ``core._named``, and the later singletons of that name, which waited on them through
    it, wait on them themselves."""
    key = (rec.spec.name, rec.spec.user)
    singleton = any(d.kind is SINGLETON for d in rec.spec.dependencies)
    given_back: list[JobRecord] = []
    for other_id in rec.waiting_on:
        waiters = core._dependents.get(other_id)
        if waiters is not None and rec.id in waiters:
            waiters.remove(rec.id)
            if not waiters:
                del core._dependents[other_id]
        other = core.jobs.get(other_id)
        namesake = other is not None and (other.spec.name, other.spec.user) == key
        if singleton and other is not None and namesake and _named_again(core, key, other):
            given_back.append(other)
    rec.waiting_on = set()
    for other in sorted(given_back, key=lambda r: r.seq):  # (a set's order is not fixed)
        for waiter in _later_singletons(core, key, other, rec):
            _wait_on(core, waiter, other, now)


def _named_again(core: SchedulerCore, key: tuple[str, str], rec: JobRecord) -> bool:
    """``rec`` is counted among the jobs of ``key`` (in the order they were registered);
    False when it was already, or has ended."""
    named = core._named.setdefault(key, [])
    if rec.id in named or rec.phase.terminal:
        return False
    named.append(rec.id)
    named.sort(key=lambda job_id: core.jobs[job_id].seq)
    return True


def renamed(core: SchedulerCore, rec: JobRecord, old: str, now: float) -> None:
    """``rec`` (waiting or running) was called ``old`` and has its new name in its spec now:
    it leaves the jobs of its old name (the singletons that waited on it for that name stop
    waiting on it, and go on once they wait on nothing else) and joins those of its new one
    (its singletons submitted after it, waiting still, wait on it too)."""
    user = rec.spec.user
    named = core._named.get((old, user))
    if named is not None and rec.id in named:
        named.remove(rec.id)
        if not named:
            del core._named[(old, user)]
    _release_namesakes(core, rec, now)
    if not rec.spec.name:
        return
    key = (rec.spec.name, user)
    if rec.phase in WAITING or rec.phase is JobPhase.RUNNING:
        for waiter in _later_singletons(core, key, rec):
            _wait_on(core, waiter, rec, now)
        _named_again(core, key, rec)


def _release_namesakes(core: SchedulerCore, rec: JobRecord, now: float) -> None:
    """The jobs waiting on ``rec`` only as a namesake (a ``singleton`` of its old name) stop
    waiting on it."""
    waiters = core._dependents.get(rec.id)
    if not waiters:
        return
    kept: list[str] = []
    for waiter_id in waiters:
        waiter = core.jobs[waiter_id]
        if waiter.phase is not JobPhase.PENDING or dependency_kinds(waiter, rec):
            kept.append(waiter_id)
            continue
        waiter.waiting_on.discard(rec.id)
        if not waiter.waiting_on and waiter.held is None:
            enqueue(core, waiter, now, f"dependencies met (job {rec.id} renamed)")
    if kept:
        core._dependents[rec.id] = kept
    else:
        del core._dependents[rec.id]


def _later_singletons(
    core: SchedulerCore, key: tuple[str, str], rec: JobRecord, but: JobRecord | None = None
) -> list[JobRecord]:
    """The waiting ``singleton`` jobs of ``key`` submitted after ``rec`` (but ``but``):
    those counted in ``core._named`` and, behind them, the earlier singletons they stand
    for."""
    found: list[JobRecord] = []
    seen: set[str] = {rec.id} if but is None else {rec.id, but.id}
    todo = list(core._named.get(key, ()))
    while todo:
        job_id = todo.pop()
        if job_id in seen:
            continue
        seen.add(job_id)
        other = core.jobs.get(job_id)
        if other is None or (other.spec.name, other.spec.user) != key:
            continue
        if not any(d.kind is SINGLETON for d in other.spec.dependencies):
            continue
        todo.extend(other.waiting_on)
        if other.phase in WAITING and other.spec.submit_time > rec.spec.submit_time:
            found.append(other)
    found.sort(key=lambda r: r.seq)
    return found


def _wait_on(core: SchedulerCore, waiter: JobRecord, rec: JobRecord, now: float) -> None:
    """``waiter`` (waiting) waits on ``rec`` too; a queued one leaves the queue to wait."""
    wait_on(core, waiter, rec.id)
    if waiter.phase is JobPhase.QUEUED:
        dequeue(core, waiter, now, leaves=False)
        if core.tenants is not None:
            core.tenants.held(waiter.id)  # (no reclaim for it while it waits)
        waiter.move(JobPhase.PENDING, now, f"waits for job {rec.id} (singleton of its name)")
        core._changed = True
