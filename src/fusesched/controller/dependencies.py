"""The dependencies of the waiting jobs a restarted controller recovers.

After a restart the core knows only the jobs the store shows unfinished, so a waiting job's
dependency on a job that ended before the restart — or, for ``after``, one that had started —
is settled here, from what the store says of that job: a dependency it met is dropped, one
it can never meet rejects the waiting job (as the core would have), and the others stay for
the core to wait on (their jobs are recovered too). A ``singleton`` stays as it is: the core
looks again at the recovered jobs of the same name and user.

A dependency on a whole array (``afterok:12``, ``aftercorr:12``) is the core's to settle
(core/array_deps.py): the controller tells it, once per array, which of the array's members
ended before the restart and how (:func:`recall`), before it hands over the waiting job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from fusesched.core.intake import never_met
from fusesched.model.events import ArrayRecalled
from fusesched.model.job import ArraySpec, DependencyKind, JobSpec
from fusesched.model.phases import TERMINAL, JobPhase
from fusesched.store.job_filters import JobFilters

if TYPE_CHECKING:
    from fusesched.controller.service import Controller


def settle_recovered(spec: JobSpec, phase_of: Callable[[str], JobPhase | None]) -> JobSpec | str:
    """``spec`` without the dependencies that the stored phases of their jobs (``phase_of``;
    ``None`` for a job the store does not have, or one held) already meet, or why one can
    never be met."""
    kept = []
    for dep in spec.dependencies:
        phase = None if dep.kind is DependencyKind.SINGLETON else phase_of(dep.job_id)
        if phase is None:
            kept.append(dep)
        elif dep.kind.broken(phase):
            return never_met(dep.kind, dep.job_id, phase)
        elif not dep.kind.met(phase):
            kept.append(dep)
    if len(kept) == len(spec.dependencies):
        return spec
    return replace(spec, dependencies=tuple(kept))


def stored_phase(phase: str) -> JobPhase | None:
    """A stored job's phase (``None`` for a stored phase that is not one, ``held``)."""
    try:
        return JobPhase(phase)
    except ValueError:
        return None


def stored(ctl: Controller, job_id: str) -> JobPhase | None:
    """The phase the store shows for a job (``None``: no such job, or held)."""
    detail = ctl.persist.store.get_job(job_id)
    return None if detail is None else stored_phase(detail.job.phase)


def reader(ctl: Controller) -> Callable[[str], JobPhase | None]:
    """:func:`stored` for ``ctl``: what :func:`settle_recovered` reads phases with."""
    return partial(stored, ctl)


def forgotten(ctl: Controller, job_id: str) -> JobPhase | None:
    """The phase of a job the core does not know: the stored one of a job no live record
    holds (one that ended before a restart, or outside the core), ``running`` for one left
    running that waits to be adopted (it had started: ``after`` on it is met at once, not
    once it is adopted), else ``None``."""
    if job_id in ctl.core.jobs:
        return None
    live = ctl.jobs.get(job_id)
    if live is not None:
        return JobPhase.RUNNING if live.adopting else None
    return stored(ctl, job_id)


def settle_submitted(ctl: Controller, spec: JobSpec) -> JobSpec | str:
    """A new job's dependencies on jobs that ended before a restart (which the core has
    forgotten), settled from the store as :func:`settle_recovered` settles a recovered
    job's; the others stay for the core."""
    if not spec.dependencies:
        return spec
    return settle_recovered(spec, partial(forgotten, ctl))


def stored_array(ctl: Controller, array_id: str) -> ArraySpec | None:
    """The indices of stored job array ``array_id`` (``None``: no array has that id)."""
    rows = ctl.persist.store.list_jobs(JobFilters(array_parent=array_id), limit=1)
    array = rows[0].request.get("array") if rows else None
    if not isinstance(array, dict):
        return None
    return ArraySpec(array["start"], array["stop"], array.get("step", 1))


def recall(ctl: Controller, spec: JobSpec, seen: set[str]) -> list[ArrayRecalled]:
    """What the core must be told before it takes ``spec``: for each array ``spec`` depends
    on whose every member the core cannot account for (one submitted before a restart),
    the array's members that ended before the restart, with their phases from the store.
    ``seen``: the arrays recalled already (``ctl.arrays_recalled``): each is read once,
    though the core takes the account only at its next cycle and other jobs come before."""
    out: list[ArrayRecalled] = []
    core = ctl.core
    for dep in spec.dependencies:
        array_id = dep.job_id
        if not array_id or array_id in seen or array_id in core.arrays.accounted:
            continue
        if array_id in core.jobs or array_id in ctl.jobs:
            continue  # a job, not an array
        array = stored_array(ctl, array_id)
        if array is None:
            continue
        seen.add(array_id)
        rows = ctl.persist.store.member_phases(array_id, [p.value for p in TERMINAL])
        ended = {job_id: JobPhase(p) for job_id, p in rows.items() if job_id not in core.jobs}
        out.append(ArrayRecalled(array_id, array, ended))
    return out
