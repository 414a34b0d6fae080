"""The dependencies of the waiting jobs a restarted controller recovers.

After a restart the core knows only the jobs the store shows unfinished, so a waiting job's
dependency on a job that ended before the restart — or, for ``after``, one that had started —
is settled here, from what the store says of that job: a dependency it met is dropped, one
it can never meet rejects the waiting job (as the core would have), and the others stay for
the core to wait on (their jobs are recovered too). A ``singleton`` stays as it is: the core
looks again at the recovered jobs of the same name and user.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from fusesched.core.intake import never_met
from fusesched.model.job import DependencyKind, JobSpec
from fusesched.model.phases import JobPhase

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
    """The stored phase of a job the core does not know and no live record holds (one that
    ended before a restart), else ``None``."""
    if job_id in ctl.core.jobs or job_id in ctl.jobs:
        return None
    return stored(ctl, job_id)


def settle_submitted(ctl: Controller, spec: JobSpec) -> JobSpec | str:
    """A new job's dependencies on jobs that ended before a restart (which the core has
    forgotten), settled from the store as :func:`settle_recovered` settles a recovered
    job's; the others stay for the core."""
    if not spec.dependencies:
        return spec
    return settle_recovered(spec, partial(forgotten, ctl))
