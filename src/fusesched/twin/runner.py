"""One twin run: a snapshot under a scenario and a seed, through the simulator, to metrics.

The metrics are those of the live system, computed the same way for the twin and for the
snapshot's own history (:func:`observed`), so the two compare directly: waits (mean, p95),
bounded slowdown, CPU and GPU utilisation (allocated over offered), makespan, jobs per
queue and per tenant, GPU fragmentation and energy.

Fragmentation is FGD's measure (``policies/gpu_frag.py``): at regular instants, the share
of idle GPUs that the workload's typical GPU tasks (its most common shapes) could not use,
averaged over the instants at which some GPU was idle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fusesched.model.events import StartJob
from fusesched.model.node import NodeSpec
from fusesched.model.resources import CPU, GPU
from fusesched.policies.gpu_frag import (
    TargetWorkload,
    fragment_counts,
    node_fragmentation,
    target_workload,
)
from fusesched.sim.engine import JobOutcome, SimJob, Simulation
from fusesched.sim.metrics import Metrics, summarize
from fusesched.sim.power import PowerSim
from fusesched.twin.build import TwinInputs, build
from fusesched.twin.scenario import Scenario
from fusesched.twin.snapshot import Snapshot

FRAG_SAMPLES = 400  # instants at which fragmentation is measured


@dataclass(frozen=True)
class RunOptions:
    energy: bool = True  # meter energy (a power hook; always-on gives the same schedule)
    fragmentation: bool = True
    starts: bool = False  # keep each job's start time (for validation)


@dataclass
class TwinResult:
    scenario: str
    seed: int
    overall: dict[str, float | int]
    queues: dict[str, dict[str, float | int]]
    tenants: dict[str, dict[str, float | int]]
    gpu_utilization: float
    fragmentation: float | None
    energy_kwh: float | None
    mean_power_kw: float | None
    nodes: int
    gpus: int
    cpus: float
    failures: int = 0  # job runs ended by injected outages
    estimated: int = 0
    skipped: int = 0
    reservations: int = 0  # advance reservations in the replay
    unreserved: int = 0  # jobs replayed without the reservation they named (not in the replay)
    wait_samples: list[float] = field(default_factory=list)  # a few hundred waits (plots)
    starts: dict[str, float] = field(default_factory=dict)  # job id -> start (snapshot time)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TwinResult:
        return cls(**dict(data))


def _gpus_of(job: SimJob) -> float:
    return float(sum(g.replicas * g.resources.get(GPU) for g in job.spec.task_groups))


def _group_metrics(
    outcomes: Sequence[JobOutcome], key: Mapping[str, str], total_cpus: float
) -> dict[str, dict[str, float | int]]:
    groups: dict[str, list[JobOutcome]] = {}
    for o in outcomes:
        groups.setdefault(key.get(o.job_id, "default"), []).append(o)
    return {name: summarize(items, total_cpus).as_dict() for name, items in sorted(groups.items())}


def metrics_of(
    outcomes: Sequence[JobOutcome],
    jobs: Sequence[SimJob],
    nodes: Sequence[NodeSpec],
    tenant_of: Mapping[str, str],
) -> tuple[Metrics, dict[str, dict[str, float | int]], dict[str, dict[str, float | int]], float]:
    """(overall, per queue, per tenant, GPU utilisation) of ``outcomes``."""
    total_cpus = sum(n.capacity.get(CPU) for n in nodes) / 1000.0
    total_gpus = float(sum(n.capacity.get(GPU) for n in nodes))
    overall = summarize(outcomes, total_cpus)
    queue_of = {o.job_id: o.queue for o in outcomes}
    queues = _group_metrics(outcomes, queue_of, total_cpus)
    tenants = _group_metrics(outcomes, tenant_of, total_cpus)
    gpu_of = {j.spec.id: _gpus_of(j) for j in jobs}
    ran = [o for o in outcomes if not o.rejected and o.start == o.start]
    used = sum((o.end - o.start) * gpu_of.get(o.job_id, 0.0) for o in ran)
    span = overall.makespan_s
    gpu_util = used / (span * total_gpus) if span > 0 and total_gpus > 0 else 0.0
    return overall, queues, tenants, gpu_util


def _target(jobs: Sequence[SimJob]) -> TargetWorkload | None:
    cpu: list[int] = []
    milli: list[int] = []
    count: list[int] = []
    for job in jobs:
        for g in job.spec.task_groups:
            gpus = g.resources.get(GPU)
            if gpus > 0:
                cpu.append(g.resources.get(CPU))
                milli.append(1000)
                count.append(gpus)
    if not cpu:
        return None
    return target_workload(cpu, milli, count, [()] * len(cpu))


def fragmentation(
    inputs: TwinInputs, outcomes: Sequence[JobOutcome], log: Sequence[object]
) -> float | None:
    """Time-averaged share of idle GPUs that typical GPU tasks cannot use (None: no GPUs)."""
    target = _target(inputs.jobs)
    gpu_cap = np.array([n.capacity.get(GPU) for n in inputs.nodes], dtype=np.int64)
    if target is None or gpu_cap.sum() == 0:
        return None
    cpu_cap = np.array([n.capacity.get(CPU) for n in inputs.nodes], dtype=np.int64)
    placed: dict[str, StartJob] = {}
    for d in log:
        if isinstance(d, StartJob):
            placed[d.job_id] = d  # the last run's placement
    changes: list[tuple[float, int, int, int]] = []  # (time, row, cpu, gpu) deltas
    for o in outcomes:
        d = placed.get(o.job_id)
        if d is None or o.start != o.start:
            continue
        for g in d.groups:
            cpu = g.resources.get(CPU)
            gpu = g.resources.get(GPU)
            for row, n in zip(g.rows.tolist(), g.row_counts.tolist(), strict=True):
                changes.append((o.start, row, n * cpu, n * gpu))
                changes.append((o.end, row, -n * cpu, -n * gpu))
    if not changes:
        return 0.0
    changes.sort(key=lambda c: (c[0], c[2]))  # ends (negative) first at one instant
    end = max(c[0] for c in changes)
    times = np.linspace(0.0, end, FRAG_SAMPLES, endpoint=False)
    used_cpu = np.zeros(len(inputs.nodes), dtype=np.int64)
    used_gpu = np.zeros(len(inputs.nodes), dtype=np.int64)
    width = max(1, int(gpu_cap.max()))
    slots = np.arange(width)[None, :]
    type_ok = target.type_ok([""] * len(inputs.nodes))
    gpu_rows = gpu_cap > 0
    ratios: list[float] = []
    k = 0
    for t in times.tolist():
        while k < len(changes) and changes[k][0] <= t:
            _, row, cpu, gpu = changes[k]
            used_cpu[row] += cpu
            used_gpu[row] += gpu
            k += 1
        free = np.clip(gpu_cap - used_gpu, 0, None)
        idle = free * 1000
        if idle[gpu_rows].sum() == 0:
            continue
        free_gpu = np.where(slots < free[:, None], 1000, 0).astype(np.int64)
        fit, sub = fragment_counts(free_gpu, target)
        free_cpu = np.clip(cpu_cap - used_cpu, 0, None)
        frag = node_fragmentation(idle, free_cpu, fit, sub, type_ok, target)
        ratios.append(float(frag[gpu_rows].sum() / idle[gpu_rows].sum()))
    return float(np.mean(ratios)) if ratios else 0.0


def run_inputs(
    inputs: TwinInputs, scenario: str, seed: int, options: RunOptions | None = None
) -> TwinResult:
    options = options or RunOptions()
    power = PowerSim(inputs.power) if options.energy and inputs.power is not None else None
    sim = Simulation(
        inputs.nodes,
        inputs.jobs,
        inputs.config,
        seed=seed,
        keep_log=options.fragmentation,
        power=power,
        outages=inputs.outages,
        reservations=inputs.reservations,
    )
    result = sim.run()
    if inputs.latency:  # waits count from the submission, not from the core's first sight
        for o in result.outcomes:
            o.submit -= inputs.latency
    overall, queues, tenants, gpu_util = metrics_of(
        result.outcomes, sim.jobs, inputs.nodes, inputs.tenant_of
    )
    frag = fragmentation(inputs, result.outcomes, result.log) if options.fragmentation else None
    waits = sorted(
        o.start - o.submit for o in result.outcomes if not o.rejected and o.start == o.start
    )
    if len(waits) > 500:
        waits = [waits[int(i)] for i in np.linspace(0, len(waits) - 1, 500)]
    report = result.power
    return TwinResult(
        scenario=scenario,
        seed=seed,
        overall=overall.as_dict(),
        queues=queues,
        tenants=tenants,
        gpu_utilization=gpu_util,
        fragmentation=frag,
        energy_kwh=report.energy_kwh if report is not None else None,
        mean_power_kw=report.mean_power_kw if report is not None else None,
        nodes=len(inputs.nodes),
        gpus=int(sum(n.capacity.get(GPU) for n in inputs.nodes)),
        cpus=sum(n.capacity.get(CPU) for n in inputs.nodes) / 1000.0,
        failures=sum(o.failures for o in result.outcomes),
        estimated=inputs.estimated,
        skipped=inputs.skipped,
        reservations=len(inputs.reservations),
        unreserved=inputs.unreserved,
        wait_samples=waits,
        starts=(
            {o.job_id: o.start + inputs.origin for o in result.outcomes if o.start == o.start}
            if options.starts
            else {}
        ),
    )


def run(
    snapshot: Snapshot,
    scenario: Scenario,
    seed: int = 0,
    options: RunOptions | None = None,
    source: str = "scenario",
) -> TwinResult:
    """Replay ``snapshot`` under ``scenario`` with ``seed``."""
    return run_inputs(build(snapshot, scenario, seed, source), scenario.name, seed, options)


def observed(snapshot: Snapshot) -> TwinResult:
    """The same metrics over what really happened (the snapshot's own start and end times)."""
    inputs = build(snapshot, Scenario(name="observed", dispatch_latency_s=0.0), 0)
    by_id = {j.id: j for j in snapshot.jobs}
    outcomes: list[JobOutcome] = []
    for job in inputs.jobs:
        snap = by_id[job.spec.id]
        o = JobOutcome(job.spec.id, job.spec.queue, snap.submit - inputs.origin)
        o.cpus = sum(g.replicas * g.resources.get(CPU) for g in job.spec.task_groups) / 1000
        if snap.start is not None:
            o.start = snap.start - inputs.origin
            o.end = (snap.end if snap.end is not None else snap.start) - inputs.origin
        elif snap.state == "Failed":
            o.rejected = "rejected"
        outcomes.append(o)
    overall, queues, tenants, gpu_util = metrics_of(
        outcomes, inputs.jobs, inputs.nodes, inputs.tenant_of
    )
    waits = sorted(o.start - o.submit for o in outcomes if o.start == o.start)
    return TwinResult(
        scenario="observed",
        seed=0,
        overall=overall.as_dict(),
        queues=queues,
        tenants=tenants,
        gpu_utilization=gpu_util,
        fragmentation=None,
        energy_kwh=None,
        mean_power_kw=None,
        nodes=len(inputs.nodes),
        gpus=int(sum(n.capacity.get(GPU) for n in inputs.nodes)),
        cpus=sum(n.capacity.get(CPU) for n in inputs.nodes) / 1000.0,
        estimated=inputs.estimated,
        skipped=inputs.skipped,
        reservations=len(snapshot.reservations),
        wait_samples=waits[:: max(1, len(waits) // 500)],
        starts={j.id: j.start for j in snapshot.jobs if j.start is not None},
    )
