"""Scheduling-cycle speed: placement decisions per second on a large heterogeneous cluster.

One ``SchedulerCore`` per (nodes, placement, backfill) setting gets a heterogeneous cluster and
50,000 pending jobs (a seeded mix of single-task batch jobs, MPI-like gangs, launcher + worker
gangs, GPU jobs and distributed training, many with node selectors, required affinity,
anti-affinity or one-task-per-node spreading; see ``make_jobs``). Then:

1. **submit** — all 50,000 ``JobSubmitted`` events go through ``core.handle`` (timed apart);
2. **fill** — ``core.cycle(now)`` on the empty cluster until a cycle starts nothing more;
3. **steady state** — rounds of: advance the clock to the true end of the next ``--exits``
   running jobs (each job's hidden runtime is a fraction of its requested walltime, so jobs end
   early, as they do on real clusters), hand those ``JobExited`` events to ``core.handle``
   (not timed), then one timed ``core.cycle(now)``.

Decisions per second = ``StartJob`` decisions / seconds spent inside ``cycle()``
(``time.perf_counter``). The steady-state figure is the headline: it is what a busy cluster with
a deep queue sees. Nothing is tuned to flatter the number: most of the queue cannot start at any
moment, so every cycle pays for the jobs it tries and fails to place.

Run: ``.venv/bin/python bench/cycle_speed.py [--quick] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import JobExited, JobSubmitted, NodeAdded, RejectJob, StartJob
from fusesched.model.job import (
    JobSpec,
    JobType,
    LabelOp,
    LabelRequirement,
    Placement,
    QoS,
    TaskGroup,
)
from fusesched.model.node import (
    LABEL_ARCH,
    LABEL_GPU_MODEL,
    LABEL_POOL,
    LABEL_RACK,
    LABEL_SWITCH,
    NodeSpec,
)
from fusesched.model.resources import CPU, GPU, MEMORY, Resources
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.registry import BACKFILL_MODES, CoreConfig
from machine_info import describe, machine

GI = 2**30
RACK_SIZE = 32
RACKS_PER_SWITCH = 8

#: Node kinds: (pool, share of the nodes, arch, cpus, memory GiB, GPUs, GPU model).
NODE_KINDS: tuple[tuple[str, float, str, int, int, int, str], ...] = (
    ("cpu", 0.55, "amd64", 64, 256, 0, ""),
    ("arm", 0.15, "arm64", 80, 256, 0, ""),
    ("highmem", 0.10, "amd64", 64, 1024, 0, ""),
    ("gpu-a100", 0.12, "amd64", 64, 1024, 8, "a100"),
    ("gpu-h100", 0.08, "amd64", 96, 2048, 8, "h100"),
)

#: Job kinds and their share of the 50,000 jobs.
JOB_MIX: dict[str, float] = {
    "batch": 0.35,  # one task, 1-16 CPUs; some pinned to an arch or pool
    "batch-affinity": 0.10,  # one task, required arch affinity + anti-affinity to GPU pools
    "mpi": 0.20,  # gang of 2-64 tasks, all or nothing, pool selector; a third one-per-node
    "launcher-workers": 0.10,  # gang of two groups: 1 launcher + 2-16 workers
    "gpu": 0.17,  # one task, 1-8 GPUs; half of them ask for a GPU model
    "gpu-train": 0.08,  # distributed training: 2-16 × 8-GPU workers + launcher, model affinity
}
WALLTIMES_S = np.array([600, 1800, 3600, 7200, 14400, 43200, 86400], dtype=np.float64)
WALLTIME_P = np.array([0.15, 0.2, 0.2, 0.15, 0.15, 0.1, 0.05])


# ---------------------------------------------------------------------------- cluster


def make_nodes(count: int) -> list[NodeSpec]:
    """``count`` nodes in pools of contiguous racks (as clusters are cabled), 32 per rack."""
    nodes: list[NodeSpec] = []
    sizes = [round(share * count) for _, share, *_ in NODE_KINDS]
    sizes[0] += count - sum(sizes)
    for (pool, _, arch, cpus, mem, gpus, model), size in zip(NODE_KINDS, sizes, strict=True):
        capacity = {CPU: cpus * 1000, MEMORY: mem * GI}
        if gpus:
            capacity[GPU] = gpus
        for _ in range(size):
            i = len(nodes)
            rack = i // RACK_SIZE
            labels = {
                LABEL_POOL: pool,
                LABEL_ARCH: arch,
                LABEL_RACK: f"r{rack:04d}",
                LABEL_SWITCH: f"s{rack // RACKS_PER_SWITCH:03d}",
            }
            if model:
                labels[LABEL_GPU_MODEL] = model
            nodes.append(NodeSpec(f"node{i:05d}", Resources(capacity), labels))
    return nodes


# ---------------------------------------------------------------------------- jobs


@dataclass(frozen=True, slots=True)
class BenchJob:
    spec: JobSpec
    runtime: float  # hidden true runtime (a fraction of the walltime)


def _res(cpu: float, mem_gi: float, gpus: int = 0) -> Resources:
    out = {CPU: int(cpu * 1000), MEMORY: int(mem_gi * GI)}
    if gpus:
        out[GPU] = gpus
    return Resources(out)


#: As an anti-affinity term: keep CPU-only jobs off the GPU pools.
GPU_POOLS = LabelRequirement(LABEL_POOL, LabelOp.IN, ("gpu-a100", "gpu-h100"))


def distinct_shapes(jobs: list[BenchJob]) -> int:
    """How many distinct (task groups, label constraints, spreading, gang size) the jobs have."""
    return len(
        {
            (s.task_groups, s.placement.cache_key(), s.placement.max_tasks_per_node, s.min_member)
            for s in (j.spec for j in jobs)
        }
    )


def make_jobs(count: int, seed: int) -> tuple[list[BenchJob], dict[str, int]]:
    """A seeded mix of ``count`` jobs (kinds and shares in ``JOB_MIX``), in submit order."""
    rng = np.random.default_rng(seed)
    kinds = list(JOB_MIX)
    drawn = rng.choice(len(kinds), size=count, p=np.array(list(JOB_MIX.values())))
    walltime = rng.choice(WALLTIMES_S, size=count, p=WALLTIME_P)
    runtime = np.maximum(30.0, walltime * rng.uniform(0.05, 1.0, size=count)).round()
    submit = np.sort(rng.uniform(0.0, 3600.0, size=count)).round(3)
    qos = rng.choice([QoS.GOLD, QoS.SILVER, QoS.BRONZE], size=count, p=[0.1, 0.7, 0.2])
    counts = dict.fromkeys(kinds, 0)
    jobs: list[BenchJob] = []
    for i in range(count):
        kind = kinds[int(drawn[i])]
        counts[kind] += 1
        groups, placement, jtype = _shape(kind, rng)
        spec = JobSpec(
            id=f"j{i:06d}",
            task_groups=groups,
            type=jtype,
            tenant=f"t{int(rng.integers(0, 20))}",
            user=f"u{int(rng.integers(0, 500))}",
            qos=QoS(qos[i]),
            walltime_s=float(walltime[i]),
            placement=placement,
            submit_time=float(submit[i]),
        )
        jobs.append(BenchJob(spec, float(runtime[i])))
    return jobs, counts


def _shape(kind: str, rng: np.random.Generator) -> tuple[tuple[TaskGroup, ...], Placement, JobType]:
    """Task groups, placement and type of one job of ``kind``."""
    if kind == "batch":
        cpus = int(rng.choice([1, 2, 4, 8, 16], p=[0.3, 0.25, 0.2, 0.15, 0.1]))
        mem = cpus * int(rng.choice([2, 4, 8]))
        u = rng.random()
        if u < 0.15:
            placement = Placement(node_selector={LABEL_ARCH: "amd64"})
        elif u < 0.22:
            placement = Placement(node_selector={LABEL_ARCH: "arm64"})
        elif u < 0.30:
            mem = int(rng.choice([128, 256, 512]))
            placement = Placement(node_selector={LABEL_POOL: "highmem"})
        else:
            placement = Placement()
        return (TaskGroup("main", 1, _res(cpus, mem)),), placement, JobType.BATCH
    if kind == "batch-affinity":
        cpus = int(rng.choice([1, 2, 4, 8]))
        arch = LabelRequirement(LABEL_ARCH, LabelOp.IN, ("amd64",))
        placement = Placement(required=(arch,), anti_affinity=(GPU_POOLS,))
        return (TaskGroup("main", 1, _res(cpus, cpus * 4)),), placement, JobType.BATCH
    if kind == "mpi":
        tasks = int(rng.choice([2, 4, 8, 16, 32, 64], p=[0.25, 0.25, 0.2, 0.15, 0.1, 0.05]))
        cpus = int(rng.choice([4, 8, 16, 32]))
        pool = "arm" if rng.random() < 0.3 else "cpu"
        spread = 1 if rng.random() < 0.33 else None
        placement = Placement(node_selector={LABEL_POOL: pool}, max_tasks_per_node=spread)
        return (TaskGroup("rank", tasks, _res(cpus, cpus * 3)),), placement, JobType.HPC
    if kind == "launcher-workers":
        workers = int(rng.integers(2, 17))
        cpus = int(rng.choice([8, 16, 32]))
        req = LabelRequirement(LABEL_POOL, LabelOp.IN, ("cpu", "highmem"))
        groups = (
            TaskGroup("launcher", 1, _res(1, 2)),
            TaskGroup("worker", workers, _res(cpus, cpus * 4)),
        )
        return groups, Placement(required=(req,)), JobType.HPC
    if kind == "gpu":
        gpus = int(rng.choice([1, 2, 4, 8], p=[0.4, 0.25, 0.2, 0.15]))
        u = rng.random()
        if u < 0.3:
            placement = Placement(node_selector={LABEL_GPU_MODEL: "a100"})
        elif u < 0.5:
            placement = Placement(node_selector={LABEL_GPU_MODEL: "h100"})
        else:
            placement = Placement()
        return (TaskGroup("main", 1, _res(gpus * 8, gpus * 64, gpus)),), placement, JobType.AI_INFER
    # gpu-train: launcher + 8-GPU workers, one worker per node, on one GPU model
    workers = int(rng.choice([2, 4, 8, 16], p=[0.4, 0.3, 0.2, 0.1]))
    model = "h100" if rng.random() < 0.5 else "a100"
    req = LabelRequirement(LABEL_GPU_MODEL, LabelOp.IN, (model,))
    groups = (
        TaskGroup("launcher", 1, _res(2, 8)),
        TaskGroup("worker", workers, _res(48, 512, 8)),
    )
    return groups, Placement(required=(req,)), JobType.AI_TRAIN


# ---------------------------------------------------------------------------- measurement


@dataclass
class Phase:
    cycles: int = 0
    started: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    per_cycle_s: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.started / self.seconds if self.seconds else float("nan")


def timed_cycle(core: SchedulerCore, now: float, phase: Phase) -> list[StartJob]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = core.cycle(now)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    starts = [d for d in out if isinstance(d, StartJob)]
    phase.cycles += 1
    phase.started += len(starts)
    phase.seconds += dt
    phase.cpu_seconds += dc
    phase.per_cycle_s.append(dt)
    return starts


def run_setting(
    nodes: list[NodeSpec],
    jobs: list[BenchJob],
    placement: str,
    backfill: str,
    exits: int,
    rounds: int,
    steady_budget_s: float,
) -> dict[str, Any]:
    gc.collect()
    core = SchedulerCore(CoreConfig(queue_order="fcfs", backfill=backfill, placement=placement))
    t0 = time.perf_counter()
    for node in nodes:
        core.handle(NodeAdded(node), 0.0)
    nodes_s = time.perf_counter() - t0
    now = 3600.0
    rejected = 0
    t0 = time.perf_counter()
    for job in jobs:
        for d in core.handle(JobSubmitted(job.spec), now):
            rejected += isinstance(d, RejectJob)
    submit_s = time.perf_counter() - t0
    runtime = {j.spec.id: j.runtime for j in jobs}
    ends: list[tuple[float, int, str]] = []
    seq = 0

    def track(starts: list[StartJob], at: float) -> None:
        nonlocal seq
        for d in starts:
            seq += 1
            heapq.heappush(ends, (at + runtime[d.job_id], seq, d.job_id))

    fill = Phase()
    while True:
        starts = timed_cycle(core, now, fill)
        track(starts, now)
        if not starts:
            break
    running_after_fill = len(ends)
    steady = Phase()
    exit_s = 0.0
    while steady.cycles < rounds and steady.seconds < steady_budget_s and ends:
        batch = [heapq.heappop(ends) for _ in range(min(exits, len(ends)))]
        now = max(now, batch[-1][0])
        t0 = time.perf_counter()
        for _, _, job_id in batch:
            core.handle(JobExited(job_id), now)
        exit_s += time.perf_counter() - t0
        track(timed_cycle(core, now, steady), now)
    total = Phase(
        fill.cycles + steady.cycles,
        fill.started + steady.started,
        fill.seconds + steady.seconds,
        fill.cpu_seconds + steady.cpu_seconds,
    )
    return {
        "nodes": len(nodes),
        "placement": placement,
        "backfill": backfill,
        "add_nodes_s": nodes_s,
        "submit_s": submit_s,
        "submit_per_s": len(jobs) / submit_s,
        "rejected_at_submit": rejected,
        "fill": _phase_dict(fill),
        "running_after_fill": running_after_fill,
        "steady": _phase_dict(steady),
        "steady_exit_handling_s": exit_s,
        "steady_exits_per_cycle": exits,
        "overall": _phase_dict(total),
        "queued_at_end": len(core.queue),
        "running_at_end": len(core.running),
        "backfilled_total": core.stats.backfilled,
    }


def _phase_dict(p: Phase) -> dict[str, Any]:
    per = sorted(p.per_cycle_s)
    return {
        "cycles": p.cycles,
        "started": p.started,
        "seconds": p.seconds,
        "cpu_seconds": p.cpu_seconds,
        "decisions_per_s": p.rate,
        "median_cycle_s": per[len(per) // 2] if per else float("nan"),
        "max_cycle_s": per[-1] if per else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1200, 10_000])
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument(
        "--placement", nargs="+", default=["first-fit", "best-fit"], choices=PLACEMENT_POLICIES
    )
    parser.add_argument("--backfill", nargs="+", default=["easy", "none"], choices=BACKFILL_MODES)
    parser.add_argument("--exits", type=int, default=100, help="job exits per steady cycle")
    parser.add_argument("--rounds", type=int, default=40, help="steady-state cycles at most")
    parser.add_argument(
        "--steady-seconds", type=float, default=12.0, help="stop steady state after this cycle time"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="10,000 jobs, 10 steady cycles")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.rounds, args.steady_seconds = min(args.jobs, 10_000), 10, 2.0

    console = Console() if sys.stdout.isatty() else Console(width=160)
    info = machine()
    console.print(describe(info))
    t0 = time.perf_counter()
    jobs, mix = make_jobs(args.jobs, args.seed)
    shapes = distinct_shapes(jobs)
    console.print(
        f"{len(jobs):,} jobs built in {time.perf_counter() - t0:.1f} s: "
        + ", ".join(f"{k} {v:,}" for k, v in mix.items())
        + f"; {shapes} distinct job shapes",
        style="dim",
    )
    results: list[dict[str, Any]] = []
    for count in args.nodes:
        nodes = make_nodes(count)
        for placement in args.placement:
            for backfill in args.backfill:
                r = run_setting(
                    nodes, jobs, placement, backfill, args.exits, args.rounds, args.steady_seconds
                )
                results.append(r)
                console.print(
                    f"  {count:,} nodes {placement} {backfill}: submit {r['submit_s']:.1f} s, "
                    f"fill {r['fill']['started']:,} starts in {r['fill']['seconds']:.2f} s, "
                    f"steady {r['steady']['started']:,} starts in "
                    f"{r['steady']['seconds']:.2f} s ({r['steady']['cycles']} cycles)",
                    style="dim",
                )

    table = Table(title=f"Scheduling-cycle speed, {len(jobs):,} pending jobs (FCFS order)")
    for col in (
        "nodes",
        "placement",
        "backfill",
        "submit jobs/s",
        "fill starts",
        "fill s",
        "fill dec/s",
        "steady cycles",
        "steady starts",
        "steady s",
        "median cycle ms",
        "steady dec/s",
        "overall dec/s",
    ):
        table.add_column(col, justify="left" if col in ("placement", "backfill") else "right")
    for r in results:
        f, s, o = r["fill"], r["steady"], r["overall"]
        table.add_row(
            f"{r['nodes']:,}",
            r["placement"],
            r["backfill"],
            f"{r['submit_per_s']:,.0f}",
            f"{f['started']:,}",
            f"{f['seconds']:.2f}",
            f"{f['decisions_per_s']:,.0f}",
            f"{s['cycles']}",
            f"{s['started']:,}",
            f"{s['seconds']:.2f}",
            f"{s['median_cycle_s'] * 1000:.1f}",
            f"{s['decisions_per_s']:,.0f}",
            f"{o['decisions_per_s']:,.0f}",
        )
    console.print(table)
    console.print(
        f"Steady state: each cycle follows the exit of the next {args.exits} running jobs (by "
        "true end time). Goal from the issue: > 5,000 decisions/s at 10,000 nodes on one core.",
        style="dim",
    )
    if args.json:
        payload = {
            "machine": info,
            "settings": {
                "jobs": len(jobs),
                "seed": args.seed,
                "mix": mix,
                "distinct_shapes": shapes,
                "exits_per_cycle": args.exits,
                "max_rounds": args.rounds,
                "steady_seconds": args.steady_seconds,
            },
            "results": results,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
