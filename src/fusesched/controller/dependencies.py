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

from fusesched.core.intake import never_met
from fusesched.model.job import DependencyKind, JobSpec
from fusesched.model.phases import JobPhase


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
