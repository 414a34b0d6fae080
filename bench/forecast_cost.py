"""What an expected-start projection (``GET /v1/starts``, ``core/forecast.py``) costs.

A core on ``--nodes`` nodes of 32 CPUs is played forward (EASY backfilling, first-fit) with a
seeded stream of jobs — one every 2 s, 1-8 tasks of 4-32 CPUs, limits of 1 min to 2 h, each
running a uniform fraction of its limit — up to the time when ``--jobs`` have been submitted;
then the live core holds ended, running and waiting jobs as a busy controller's would. Timed
(``time.perf_counter``, best of ``--repeat``):

* **copy** — :func:`fusesched.core.forecast.clone`, what the controller does under its lock;
  and the same copy with records deep-copied field by field (the default ``copy.deepcopy``,
  as before ``JobRecord.__deepcopy__``), measured in the same run for the ratio;
* **projection** — :func:`fusesched.core.forecast.forecast` on the copy (outside the lock).

Run: ``.venv/bin/python bench/forecast_cost.py [--jobs 5000 20000] [--nodes 500] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import time
from pathlib import Path
from typing import Any

from fusesched.core.forecast import clone, forecast
from fusesched.core.records import JobRecord
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import Event, JobExited, JobSubmitted, NodeAdded, StartJob
from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.node import NodeSpec
from fusesched.model.phases import JobPhase
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig
from machine_info import describe, machine


def busy_core(n_nodes: int, n_jobs: int, seed: int = 1) -> tuple[SchedulerCore, float]:
    """The core after ``n_jobs`` submissions (one per 2 s), and the time then."""
    rng = random.Random(seed)
    core = SchedulerCore(CoreConfig(backfill="easy"))
    for i in range(n_nodes):
        core.handle(NodeAdded(NodeSpec(f"n{i}", Resources.parse({"cpu": 32}))), 0.0)
    runtime: dict[str, float] = {}
    ends: list[tuple[float, str]] = []
    now = 0.0
    for i in range(n_jobs):
        now = 2.0 * i
        events: list[Event] = []
        while ends and ends[0][0] <= now:
            events.append(JobExited(heapq.heappop(ends)[1]))
        limit = float(rng.choice([60, 600, 3600, 7200]))
        group = TaskGroup(
            "main", rng.randint(1, 8), Resources.parse({"cpu": rng.choice([4, 8, 16, 32])})
        )
        spec = JobSpec(id=f"j{i}", task_groups=(group,), walltime_s=limit, submit_time=now)
        runtime[spec.id] = limit * rng.random()
        events.append(JobSubmitted(spec))
        for decision in core.step(now, events):
            if isinstance(decision, StartJob):
                heapq.heappush(ends, (now + runtime[decision.job_id], decision.job_id))
    return core, now


def best(repeat: int, fn: Any) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(n_nodes: int, n_jobs: int, repeat: int) -> dict[str, Any]:
    core, now = busy_core(n_nodes, n_jobs)
    phases = [r.phase for r in core.jobs.values()]
    waiting = sum(p in (JobPhase.QUEUED, JobPhase.PENDING) for p in phases)
    copy_s = best(repeat, lambda: clone(core))
    own = JobRecord.__deepcopy__
    del JobRecord.__deepcopy__  # type: ignore[misc]  # (the default deep copy, for the ratio)
    try:
        default_s = best(repeat, lambda: clone(core))
    finally:
        JobRecord.__deepcopy__ = own  # type: ignore[method-assign]
    project_s = best(repeat, lambda: forecast(clone(core), now, copied=True)) - copy_s
    return {
        "nodes": n_nodes,
        "jobs_known": len(core.jobs),
        "waiting": waiting,
        "running": len(core.running),
        "copy_s": round(copy_s, 3),
        "copy_default_records_s": round(default_s, 3),
        "copy_speedup": round(default_s / copy_s, 2),
        "projection_s": round(project_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[5000, 20000])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if min(args.jobs) < 1 or args.nodes < 1 or args.repeat < 1:
        parser.error("--jobs, --nodes and --repeat must be positive")
    rows = []
    for n_jobs in args.jobs:
        row = measure(args.nodes, n_jobs, args.repeat)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(describe(machine(), markup=False))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
