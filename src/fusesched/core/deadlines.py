"""Deadlines (``sbatch --deadline``): a waiting job is removed once it can no longer end by
its deadline, that is once it has not started by ``deadline − time limit`` (its *latest
start*; a job without a time limit must start before the deadline itself). A running job is
not stopped by its deadline; one requeued later is watched again.

The core keeps a heap of (latest start, job id) for the jobs that have a deadline, and looks
at it twice a cycle: before placing jobs, for those whose latest start has passed (too late
to start now), and after, for those whose latest start is now (the cycle could still have
started them): a cycle of a workload without deadlines pays two tests of an empty list.
The removed job ends ``cancelled`` with the reason :data:`REASON` (Slurm's state
``DEADLINE``, reason ``DeadLine``), and what waited on it is settled as for any cancelled
job. Pure, like the rest of the core.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Final

from fusesched.core.records import JobRecord
from fusesched.model.events import Decision
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase

if TYPE_CHECKING:
    from fusesched.core.scheduler import SchedulerCore

#: The reason a job removed for its deadline ends with (Slurm's reason code first).
REASON: Final = "DeadLine: it could no longer end by its deadline"

_WAITING: Final = frozenset({JobPhase.PENDING, JobPhase.QUEUED})


def latest_start(spec: JobSpec) -> float:
    """The last moment ``spec`` may start and still end by its deadline (which it has)."""
    assert spec.deadline is not None
    return spec.deadline - (spec.walltime_s or 0.0)


def watch(core: SchedulerCore, rec: JobRecord) -> None:
    """Watch ``rec`` (a job with a deadline, registered or requeued) until it starts."""
    heapq.heappush(core._deadlines, (latest_start(rec.spec), rec.id))


def next_due(core: SchedulerCore) -> float | None:
    """When the next watched job's latest start passes, or None."""
    return core._deadlines[0][0] if core._deadlines else None


def expire(core: SchedulerCore, now: float, this_cycle: bool) -> list[Decision]:
    """Remove every waiting job whose latest start is before ``now`` (before the cycle places
    jobs) or also at ``now`` (``this_cycle``: after it, which could still have started
    them); the decisions that forces (the rejections of jobs that needed theirs to succeed)."""
    out: list[Decision] = []
    heap = core._deadlines
    while heap and (heap[0][0] < now or (this_cycle and heap[0][0] == now)):
        _, job_id = heapq.heappop(heap)
        rec = core.jobs.get(job_id)
        if rec is None or rec.phase not in _WAITING:
            continue  # started (a requeue watches it again) or ended
        later = latest_start(rec.spec)
        if later > now or (later == now and not this_cycle):
            heapq.heappush(heap, (later, job_id))  # (its time limit was shortened since)
            continue
        out.extend(core._cancel(job_id, REASON, now))
    return out
