"""Schedule digests: a SHA-256 of every decision the core makes in a few fixed settings.

A speed change to the core must not change any schedule. This script replays each setting
and hashes, in order, every decision with the time it was made: for a start, the job, its
task groups (name, per-task resources, node rows, tasks per node) and whether it was
backfilled; for a reservation, the job, its start time and nodes; rejections, stops and
preemptions with their fields; for the replays also every job's outcome (start, end, nodes,
backfilled, rejection). Run it on the code before a change and after: the digests must be
equal.

Settings:

* ``sdsc-fcfs-easy`` — the whole SDSC-SP2 trace, FCFS + EASY;
* ``sdsc-sjf-conservative`` — the whole SDSC-SP2 trace, SJF + conservative backfilling;
* ``curie30k-fcfs-easy`` — the first 30,000 CEA-Curie jobs, FCFS + EASY;
* ``cycle1200-<placement>-<backfill>`` — ``bench/cycle_speed.py``'s cluster of 1,200 nodes
  and its seeded jobs (10,000 by default), fill then a fixed number of steady cycles (no
  time budget, so the run is the same on any machine).

Run: ``.venv/bin/python bench/schedule_digest.py [--only NAME ...] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    Decision,
    JobExited,
    JobSubmitted,
    NodeAdded,
    PreemptJob,
    RejectJob,
    ReserveJob,
    StartJob,
    StopJob,
)
from fusesched.policies.registry import CoreConfig
from fusesched.sim.engine import Simulation
from fusesched.sim.workload import swf_workload
from fusesched.traces.swf import load_swf

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces" / "pwa-swf"
SDSC = "SDSC-SP2-1998-4.2-cln.swf.gz"
CURIE = "CEA-Curie-2011-2.1-cln.swf.gz"


def _decision_text(d: Decision) -> str:
    if isinstance(d, StartJob):
        groups = ";".join(
            f"{g.group}|{sorted(g.resources.items())}|{g.rows.tolist()}|{g.row_counts.tolist()}"
            for g in d.groups
        )
        return f"S {d.job_id} {int(d.backfilled)} {groups}"
    if isinstance(d, ReserveJob):
        return f"R {d.job_id} {d.start_time!r} {list(d.nodes)}"
    if isinstance(d, RejectJob):
        return f"X {d.job_id} {d.reason}"
    if isinstance(d, StopJob):
        return f"T {d.job_id} {d.reason}"
    if isinstance(d, PreemptJob):
        return f"P {d.job_id} {d.reason} {d.grace_s!r}"
    raise TypeError(d)  # pragma: no cover


class _Hasher:
    def __init__(self) -> None:
        self.sha = hashlib.sha256()
        self.decisions = 0
        self.starts = 0

    def add(self, now: float, decisions: Iterable[Decision]) -> None:
        for d in decisions:
            self.decisions += 1
            self.starts += isinstance(d, StartJob)
            self.sha.update(f"{now!r} {_decision_text(d)}\n".encode())

    def line(self, text: str) -> None:
        self.sha.update(text.encode() + b"\n")


def replay_digest(trace: str, limit: int | None, order: str, backfill: str) -> dict[str, Any]:
    w = swf_workload(load_swf(TRACES / trace), limit=limit)
    sim = Simulation(w.nodes, w.jobs, CoreConfig(queue_order=order, backfill=backfill))
    h = _Hasher()
    core = sim.core
    step = core.step

    def recording_step(now: float, events: Any = ()) -> list[Decision]:
        out = step(now, events)
        h.add(now, out)
        return out

    core.step = recording_step  # type: ignore[method-assign]
    result = sim.run()
    for o in result.outcomes:
        h.line(
            f"O {o.job_id} {o.start!r} {o.end!r} {o.nodes} {int(o.backfilled)} {o.rejected} "
            f"{int(o.timed_out)}"
        )
    return {
        "digest": h.sha.hexdigest(),
        "decisions": h.decisions,
        "starts": h.starts,
        "cycles": result.cycles,
    }


def cycle_digest(
    nodes: int, jobs: int, placement: str, backfill: str, rounds: int, exits: int
) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "bench"))
    from cycle_speed import make_jobs, make_nodes

    bench_jobs, _ = make_jobs(jobs, 7)
    core = SchedulerCore(CoreConfig(queue_order="fcfs", backfill=backfill, placement=placement))
    h = _Hasher()
    for node in make_nodes(nodes):
        core.handle(NodeAdded(node), 0.0)
    now = 3600.0
    for job in bench_jobs:
        h.add(now, core.handle(JobSubmitted(job.spec), now))
    runtime = {j.spec.id: j.runtime for j in bench_jobs}
    ends: list[tuple[float, int, str]] = []
    seq = 0

    def cycle() -> int:
        nonlocal seq
        out = core.cycle(now)
        h.add(now, out)
        started = 0
        for d in out:
            if isinstance(d, StartJob):
                seq += 1
                started += 1
                heapq.heappush(ends, (now + runtime[d.job_id], seq, d.job_id))
        return started

    while cycle():
        pass
    for _ in range(rounds):
        if not ends:
            break
        batch = [heapq.heappop(ends) for _ in range(min(exits, len(ends)))]
        now = max(now, batch[-1][0])
        for _, _, job_id in batch:
            h.add(now, core.handle(JobExited(job_id), now))
        cycle()
    h.line(f"end {len(core.queue)} {len(core.running)} {core.stats.backfilled}")
    return {"digest": h.sha.hexdigest(), "decisions": h.decisions, "starts": h.starts}


SETTINGS: dict[str, Callable[[], dict[str, Any]]] = {
    "sdsc-fcfs-easy": lambda: replay_digest(SDSC, None, "fcfs", "easy"),
    "sdsc-sjf-conservative": lambda: replay_digest(SDSC, None, "sjf", "conservative"),
    "curie30k-fcfs-easy": lambda: replay_digest(CURIE, 30_000, "fcfs", "easy"),
    "cycle1200-first-fit-easy": lambda: cycle_digest(1200, 10_000, "first-fit", "easy", 40, 100),
    "cycle1200-best-fit-easy": lambda: cycle_digest(1200, 10_000, "best-fit", "easy", 20, 100),
    "cycle1200-first-fit-none": lambda: cycle_digest(1200, 10_000, "first-fit", "none", 20, 100),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(SETTINGS), help="these settings")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the digests here")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for name in args.only or list(SETTINGS):
        t0 = time.perf_counter()
        res = SETTINGS[name]()
        res["seconds"] = round(time.perf_counter() - t0, 1)
        results[name] = res
        print(
            f"{name:28s} {res['digest']}  decisions {res['decisions']:,}  "
            f"starts {res['starts']:,}  ({res['seconds']} s)",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
