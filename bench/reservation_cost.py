"""What an advance reservation costs the scheduling cycle (docs/RESERVATIONS.md, "Cost").

A 2,000-node cluster (32 CPUs each) is filled with running jobs (one to eight whole nodes,
time limits of 10 minutes to 8 hours) and 20,000 jobs wait behind them (a seeded mix of
one-task jobs and gangs of one to 64 whole nodes; a tenth have no time limit). Then, for
each backfill policy, with no reservation, one maintenance window of 1,000 nodes in an hour
and one of a single node, rounds of: the next running job ends at its estimated end
(``JobExited``, not timed), one timed ``core.cycle(now)``. Every cycle after an exit plans
the head again (EASY: its shadow time; conservative: the profile for the first 64 jobs),
which is where reservations cost something. ``--forecast`` also times one projection
(``fusesched jobs --start``) per setting.

Run: ``nice -n 19 .venv/bin/python bench/reservation_cost.py [--rounds N] [--forecast]``.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import random
import statistics
import time

from fusesched.core.forecast import forecast
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    JobExited,
    JobSubmitted,
    NodeAdded,
    ReservationSet,
    StartJob,
)
from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.node import NodeSpec
from fusesched.model.reservation import Reservation
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig

NODES = 2_000
WAITING = 20_000
CPUS = 32


def make_core(backfill: str) -> SchedulerCore:
    core = SchedulerCore(CoreConfig(backfill=backfill))
    for k in range(NODES):
        core.handle(NodeAdded(NodeSpec(f"n{k:04d}", Resources.parse({"cpu": CPUS}))), 0.0)
    return core


def spec(job_id: str, rng: random.Random, at: float, tasks: int, walltime: float | None) -> JobSpec:
    group = TaskGroup(
        "main", tasks, Resources.parse({"cpu": CPUS if tasks > 1 else rng.choice([4, 8, 32])})
    )
    return JobSpec(job_id, (group,), walltime_s=walltime, submit_time=at)


def setting(backfill: str, reserved: int, rounds: int, with_forecast: bool) -> dict[str, float]:
    rng = random.Random(7)
    core = make_core(backfill)
    ends: list[tuple[float, str]] = []
    # fill the cluster
    k = 0
    placed = 0
    while placed < NODES:
        tasks = min(rng.randint(1, 8), NODES - placed)
        wall = rng.uniform(600, 8 * 3600)
        core.handle(JobSubmitted(spec(f"r{k}", rng, 0.0, tasks, wall)), 0.0)
        placed += tasks
        k += 1
    for d in core.cycle(0.0):
        if isinstance(d, StartJob):
            heapq.heappush(ends, (core.jobs[d.job_id].est_end or 0.0, d.job_id))
    now = 1.0
    if reserved:
        names = tuple(f"n{k:04d}" for k in range(NODES - reserved, NODES))
        core.handle(ReservationSet(Reservation("maint", names, 3600.0, 7200.0)), now)
    for j in range(WAITING):
        tasks = 1 if rng.random() < 0.6 else rng.choice([2, 4, 8, 16, 32, 64])
        wall = None if rng.random() < 0.1 else rng.uniform(300, 12 * 3600)
        core.handle(JobSubmitted(spec(f"w{j}", rng, now, tasks, wall)), now)
    core.cycle(now)
    times: list[float] = []
    gc.collect()
    for _ in range(rounds):
        if not ends:
            break
        now, job_id = heapq.heappop(ends)
        core.handle(JobExited(job_id), now)
        t0 = time.perf_counter()
        out = core.cycle(now)
        times.append(time.perf_counter() - t0)
        for d in out:
            if isinstance(d, StartJob):
                heapq.heappush(ends, (core.jobs[d.job_id].est_end or now, d.job_id))
    result = {
        "median_ms": 1000 * statistics.median(times),
        "p90_ms": 1000 * sorted(times)[int(0.9 * (len(times) - 1))],
        "total_s": sum(times),
    }
    if with_forecast:
        t0 = time.perf_counter()
        forecast(core, now, horizon_s=86_400.0)
        result["forecast_s"] = time.perf_counter() - t0
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="timed cycles per setting")
    parser.add_argument("--forecast", action="store_true", help="also time one projection")
    parser.add_argument("--backfill", nargs="+", default=["easy", "conservative"])
    args = parser.parse_args()
    for backfill in args.backfill:
        for reserved, label in ((0, "no reservation"), (1_000, "1,000 nodes"), (1, "1 node")):
            r = setting(backfill, reserved, args.rounds, args.forecast)
            extra = f"  forecast {r['forecast_s']:.1f} s" if "forecast_s" in r else ""
            print(
                f"{backfill:13} {label:15} cycle median {r['median_ms']:7.1f} ms  "
                f"p90 {r['p90_ms']:7.1f} ms  total {r['total_s']:6.2f} s{extra}",
                flush=True,
            )


if __name__ == "__main__":
    main()
