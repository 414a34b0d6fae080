"""The RLScheduler evaluation, scheduled by the general core instead of the artifact's loop.

Same input and the same yardstick as :mod:`fusesched.sim.protocols.rlscheduler` — the trace read
with the protocol's clean-up, the same sampled 1,024-job sequences (seed 1), each on an empty
cluster from its first submit time, bounded slowdown with a 10 s threshold and the protocol's
utilisation — but each sequence is replayed by :class:`~fusesched.sim.engine.Simulation` through
:class:`~fusesched.core.scheduler.SchedulerCore` with any :class:`CoreConfig` (queue order,
backfilling, runtime prediction), so a fusesched policy can stand beside the published table.

What the core sees of a job is its size (``n`` one-CPU tasks on ``MaxNodes`` nodes sharing
``MaxProcs`` CPUs), its user and its requested time ``r`` as the protocol's clean-up gives it
to every policy: where the trace has no request (field 9 = −1), that is the job's actual run
time — all of Lublin-1 and Lublin-2, 66 of SDSC-SP2's 59,715 records, none of HPC2N's — so
there, as for the published heuristics, the estimate is exact (like for like with the table,
but not a prediction). A job whose ``r`` is still ≤ 0 (SDSC-SP2 job 5057, ``r`` = −1) gets no
walltime: the core's default estimate. Jobs run for their actual run time and are never
killed. A job with ``n`` ≤ 0 (which the protocol keeps, taking no nodes) asks for one CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fusesched.model.job import JobSpec, JobType, TaskGroup
from fusesched.model.resources import CPU, Resources
from fusesched.policies.registry import CoreConfig
from fusesched.sim.engine import JobOutcome, SimJob, Simulation
from fusesched.sim.protocols.rlscheduler import (
    ProtocolResult,
    SequenceResult,
    protocol_starts,
    score_sequence,
)
from fusesched.sim.workload import homogeneous_nodes
from fusesched.traces.swf import RlJobs

__all__ = ["run_core_protocol", "sequence_jobs"]


def sequence_jobs(jobs: RlJobs, first: int, count: int) -> list[SimJob]:
    """Jobs ``first`` .. ``first + count - 1`` as core jobs, submit times relative to the
    first one's."""
    t0 = float(jobs.submit[first])
    groups: dict[int, tuple[TaskGroup, ...]] = {}
    users = jobs.user
    out: list[SimJob] = []
    for i in range(first, first + count):
        n = max(1, int(jobs.procs[i]))
        group = groups.get(n)
        if group is None:
            group = groups[n] = (TaskGroup("main", n, Resources({CPU: 1000})),)
        request = float(jobs.estimate[i])
        user = int(users[i]) if users is not None else -1
        spec = JobSpec(
            id=str(int(jobs.job_id[i])),
            task_groups=group,
            type=JobType.HPC,
            user=str(user) if user >= 0 else "",
            walltime_s=request if request > 0 else None,
            submit_time=float(jobs.submit[i]) - t0,
        )
        out.append(SimJob(spec, float(jobs.run[i])))
    return out


def run_core_protocol(
    jobs: RlJobs,
    config: CoreConfig,
    name: str,
    *,
    backfill: bool = True,
    seed: int = 1,
    sequence_length: int = 1024,
    iterations: int = 10,
    batch_job_slice: int = 0,
    progress: Callable[[int], None] | None = None,
) -> ProtocolResult:
    """Every sampled sequence through the core under ``config``; ``name`` labels the result
    (``backfill`` only labels it too: the config's backfilling is what runs)."""
    starts = protocol_starts(jobs, seed, sequence_length, iterations, batch_job_slice)
    nodes = homogeneous_nodes(jobs.max_nodes, jobs.max_procs)
    results = []
    for index, first in enumerate(starts):
        sim_jobs = sequence_jobs(jobs, first, sequence_length)
        outcome = Simulation(nodes, sim_jobs, config).run()
        results.append(_score(outcome.outcomes, jobs, first, index))
        if progress is not None:
            progress(index + 1)
    return ProtocolResult(name, backfill, tuple(results))


def _score(outcomes: Sequence[JobOutcome], jobs: RlJobs, first: int, index: int) -> SequenceResult:
    """The protocol's metrics (PROTOCOL.md section 5) of one replayed sequence."""
    by_id = {o.job_id: o for o in outcomes}
    window = slice(first, first + len(outcomes))
    start = np.array([by_id[str(int(j))].start for j in jobs.job_id[window]], dtype=np.float64)
    submit = jobs.submit[window].astype(np.float64) - float(jobs.submit[first])
    run, procs = jobs.run[window], jobs.procs[window]
    return score_sequence(index, first, submit, start, run, procs, jobs.max_procs)
