"""Whether new dependencies, or a new name, would close a circle of jobs waiting on each other
(Slurm's ``Circular job dependency``; :mod:`fusesched.core.job_rewire`, for ``scontrol
update``: a submitted job cannot close one, nothing waits on it yet).

A job waits on the jobs its dependencies name, an array's id standing for each of its members
(``afterok:7``), an ``aftercorr`` on an array for the member of its own index when there is
one, and a ``singleton`` for the earlier jobs of its name and user that have not ended. The
walk follows what the jobs wait on now (``waiting_on``: job ids and array ids), through the
members of the arrays the core holds, and through the dependencies of the jobs a shell is to
submit before the change (``coming``). Reads the core only.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from fusesched.core.array_deps import partner
from fusesched.model.job import DependencyKind, JobSpec

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

SINGLETON, AFTER_CORR = DependencyKind.SINGLETON, DependencyKind.AFTER_CORR


def would_wait_on(core: SchedulerCore, spec: JobSpec) -> list[str]:
    """The jobs (and arrays) job ``spec`` would wait on, as far as the core knows them."""
    out: list[str] = []
    for dep in spec.dependencies:
        if dep.kind is SINGLETON:
            if spec.name:
                out.extend(earlier_namesakes(core, (spec.name, spec.user), spec))
            continue
        array = core.arrays.specs.get(dep.job_id) if dep.job_id not in core.jobs else None
        member = partner(spec, dep.job_id, array) if dep.kind is AFTER_CORR and array else ""
        out.append(member or dep.job_id)
    return out


def earlier_namesakes(core: SchedulerCore, key: tuple[str, str], spec: JobSpec) -> list[str]:
    """The jobs of ``key`` (name, user) submitted no later than ``spec`` that have not ended,
    but ``spec``'s own: those the last singletons registered in ``core._named`` stand for
    too (their ``waiting_on``), and those ``spec``'s job, a singleton now, stands for."""
    found: list[str] = []
    seen = {spec.id}
    own = core.jobs.get(spec.id)
    todo = [*core._named.get(key, ()), *(own.waiting_on if own is not None else ())]
    while todo:
        job_id = todo.pop()
        if job_id in seen:
            continue
        seen.add(job_id)
        other = core.jobs.get(job_id)
        if other is None or other.phase.terminal or (other.spec.name, other.spec.user) != key:
            continue
        if other.spec.submit_time <= spec.submit_time:
            found.append(job_id)
        if any(d.kind is SINGLETON for d in other.spec.dependencies):
            todo.extend(other.waiting_on)
    return found


def reached(
    core: SchedulerCore,
    start: Iterable[str],
    targets: Collection[str],
    coming: Mapping[str, JobSpec] = MappingProxyType({}),
) -> tuple[str, str] | None:
    """The first of ``targets`` that a job waiting on ``start`` would wait on, at some
    remove, and the job that waits on it (``""``: the target is in ``start``), or None."""
    seen: set[str] = set()
    todo = [(job_id, "") for job_id in start]
    while todo:
        job_id, by = todo.pop()
        if job_id in targets:
            return job_id, by
        if job_id in seen:
            continue
        seen.add(job_id)
        todo.extend((other, job_id) for other in _waits(core, job_id, coming))
    return None


def _waits(core: SchedulerCore, job_id: str, coming: Mapping[str, JobSpec]) -> Iterable[str]:
    """What ``job_id`` waits on: a job's ``waiting_on``; an array's, its members the core
    holds; a coming job's (or coming array's), the jobs its dependencies name."""
    other = core.jobs.get(job_id)
    if other is not None:
        return other.waiting_on
    array = core.arrays.specs.get(job_id)
    if array is not None:
        members = (f"{job_id}_{index}" for index in array.indices)
        return [member for member in members if member in core.jobs]
    later = coming.get(job_id) or coming.get(job_id.rpartition("_")[0]) if coming else None
    if later is not None:
        return [d.job_id for d in later.dependencies if d.job_id]
    return ()
