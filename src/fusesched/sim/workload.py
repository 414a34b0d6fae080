"""Workloads for the simulator: a real SWF trace or a small synthetic one.

In ``full`` mode an SWF trace becomes a cluster of ``MaxNodes`` nodes sharing ``MaxProcs``
processors (the remainder spread one each over the first nodes, so the total is exact) and one
HPC job per record with ``n`` one-CPU tasks. The record clean-up follows the RLScheduler rules
(see docs/RLSCHEDULER.md) so both modes read a trace the same way: n = max(allocated,
requested) processors, estimate = requested time or else the actual run time, run time −1 →
10 s, zero-length jobs dropped. Jobs with no processors are dropped and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fusesched.model.fast import builder
from fusesched.model.job import (
    NO_PLACEMENT,
    ArraySpec,
    Dependency,
    JobSpec,
    JobType,
    Placement,
    QoS,
    TaskGroup,
)
from fusesched.model.node import LABEL_POOL, NodeSpec
from fusesched.model.resources import CPU, MEMORY, Resources
from fusesched.sim.engine import SimJob, paused_gc
from fusesched.traces.swf import SwfTrace

# a spec and its simulated truth per trace record: built without calling their classes (see
# fusesched.model.fast.builder), by position: id, task groups, type, name, tenant, queue,
# user, priority, QoS, walltime, min_member, placement, dependencies, array, array index,
# array parent, submit time (the rest as defaulted)
_job_spec: Callable[
    [
        str,
        tuple[TaskGroup, ...],
        JobType,
        str,
        str,
        str,
        str,
        int,
        QoS,
        float | None,
        int | None,
        Placement,
        tuple[Dependency, ...],
        ArraySpec | None,
        int | None,
        str | None,
        float,
    ],
    JobSpec,
] = builder(JobSpec)
_sim_job: Callable[[JobSpec, float], SimJob] = builder(SimJob)


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    nodes: tuple[NodeSpec, ...]
    jobs: tuple[SimJob, ...]
    dropped: int = 0

    @property
    def total_cpus(self) -> int:
        return sum(n.capacity.get(CPU) for n in self.nodes) // 1000


def homogeneous_nodes(count: int, total_cpus: int, pool: str = "main") -> tuple[NodeSpec, ...]:
    """``count`` nodes sharing ``total_cpus`` CPUs as evenly as whole CPUs allow."""
    base, extra = divmod(total_cpus, count)
    memory = 4 * 2**30
    return tuple(
        NodeSpec(
            f"n{i:05d}",
            Resources({CPU: (base + (1 if i < extra else 0)) * 1000, MEMORY: memory}),
            {LABEL_POOL: pool},
        )
        for i in range(count)
    )


def swf_workload(trace: SwfTrace, limit: int | None = None) -> Workload:
    """Turn an SWF trace into nodes and jobs for the general core (``--protocol full``)."""
    with paused_gc():
        return _swf_workload(trace, limit)


def _swf_workload(trace: SwfTrace, limit: int | None) -> Workload:
    header = trace.header
    procs = np.maximum(trace.alloc_procs, trace.req_procs)
    estimate = np.where(trace.req_time == -1, trace.run, trace.req_time).astype(np.float64)
    run = np.where(trace.run < 0, 10, trace.run).astype(np.float64)
    estimate = np.where(estimate > 0, estimate, run)
    keep = (run > 0) & (procs > 0)
    dropped = int((run > 0).sum() - keep.sum())
    order = np.argsort(trace.job_id[keep], kind="stable")
    idx = np.flatnonzero(keep)[order]
    if limit is not None:
        idx = idx[:limit]
    max_procs = header.max_procs or int(procs.max())
    max_nodes = header.max_nodes or max_procs
    nodes = homogeneous_nodes(max_nodes, max_procs)
    start = float(trace.submit[idx[0]]) if len(idx) else 0.0
    # plain Python values up front, each distinct group, queue and user name built once:
    # indexing NumPy arrays one element at a time is slow
    groups = {
        n: (TaskGroup("main", n, Resources({CPU: 1000})),) for n in np.unique(procs[idx]).tolist()
    }
    queue_codes = trace.queue[idx].tolist()
    queues = {q: f"q{q}" if q >= 0 else "default" for q in set(queue_codes)}
    user_codes = trace.user[idx].tolist()
    users = {u: str(u) if u >= 0 else "" for u in set(user_codes)}  # -1: unknown
    rows = zip(
        map(str, trace.job_id[idx].tolist()),
        map(groups.__getitem__, procs[idx].tolist()),
        map(queues.__getitem__, queue_codes),
        map(users.__getitem__, user_codes),
        estimate[idx].tolist(),
        (trace.submit[idx].astype(np.float64) - start).tolist(),
        run[idx].tolist(),
        strict=True,
    )
    hpc, silver = JobType.HPC, QoS.SILVER
    # every field by position (about a seventh cheaper than seven keywords; see _job_spec)
    jobs = tuple(
        _sim_job(
            _job_spec(
                job_id,
                group,
                hpc,
                "",
                "default",
                queue,
                user,
                0,
                silver,
                walltime,
                None,
                NO_PLACEMENT,
                (),
                None,
                None,
                None,
                submit,
            ),
            runtime,
        )
        for job_id, group, queue, user, walltime, submit, runtime in rows
    )
    return Workload(str(trace.path), nodes, jobs, dropped)


def synthetic_workload(jobs: int = 2000, nodes: int = 64, seed: int = 1) -> Workload:
    """A small Lublin-like workload for when no real trace is at hand (deterministic)."""
    rng = np.random.default_rng(seed)
    size = 2 ** rng.integers(0, 7, size=jobs)  # 1..64 CPUs, powers of two
    size = np.minimum(np.where(rng.random(jobs) < 0.3, 1, size), nodes * 4)
    runtime = np.exp(rng.uniform(np.log(30), np.log(36_000), size=jobs)).round()
    estimate = np.ceil(runtime * rng.uniform(1.0, 4.0, size=jobs))
    # offered load ~0.85 of a `nodes`-CPU machine
    mean_gap = float((size * runtime).mean()) / (0.85 * nodes * 4)
    submit = np.cumsum(rng.exponential(mean_gap, size=jobs)).round()
    out: list[SimJob] = []
    for i in range(jobs):
        spec = JobSpec(
            id=str(i + 1),
            task_groups=(TaskGroup("main", int(size[i]), Resources({CPU: 1000})),),
            type=JobType.HPC,
            queue=("short" if estimate[i] < 3600 else "long"),
            walltime_s=float(estimate[i]),
            submit_time=float(submit[i]),
        )
        out.append(SimJob(spec, float(runtime[i])))
    return Workload(f"synthetic(seed={seed})", homogeneous_nodes(nodes, nodes * 4), tuple(out))
