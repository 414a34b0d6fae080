"""Replay speed: whole SWF traces through the general scheduling core, against the bare loop.

For each trace, every repeat times, in the same process and one after the other:

* **general** — ``load_swf`` + ``swf_workload`` (load), then
  ``Simulation(w.nodes, w.jobs, CoreConfig(queue_order="fcfs", backfill="easy")).run()``
  (simulate): the event engine around ``SchedulerCore``, NumPy node arrays, gang statements;
* **baseline** — ``load_swf`` + ``rlscheduler_jobs`` (load), then
  ``replay_whole_trace(jobs, "fcfs", True)`` (simulate): the special-purpose RLScheduler protocol
  loop that knows only node counts.

The medians of ``--repeat`` runs are reported. Both schedules are also scored the same way
(bounded slowdown with a 10 s threshold; utilisation = Σ run·procs / ((last start − first
submit) · MaxProcs), the protocol's definition). They differ by design: the protocol loop is the
RLScheduler artifact's EASY variant (shadow time only, no extra-node rule, whole nodes of
⌈n / ppn⌉), while the general core's EASY also lets a job start if it only uses resources the
head will not need at its reservation, and places one-CPU tasks on any node with a free CPU.

Run: ``.venv/bin/python bench/replay_speed.py [--trace sdsc-sp2] [--repeat 3] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from fusesched.policies.registry import CoreConfig
from fusesched.sim.engine import SimResult, Simulation
from fusesched.sim.metrics import summarize
from fusesched.sim.protocols.rlscheduler import BSLD_THRESHOLD_S, replay_whole_trace
from fusesched.sim.workload import Workload, swf_workload
from fusesched.traces.swf import SwfTrace, load_swf, rlscheduler_jobs
from machine_info import describe, machine

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACES = ROOT.parent / "shared" / "traces" / "pwa-swf"
TRACES = {
    "sdsc-sp2": "SDSC-SP2-1998-4.2-cln.swf.gz",
    "cea-curie": "CEA-Curie-2011-2.1-cln.swf.gz",
}
#: Targets stated in the issue for the general core (load + simulate, FCFS + EASY).
TARGET_S = {"sdsc-sp2": 2.0, "cea-curie": 15.0}


def protocol_metrics(result: SimResult, max_procs: int) -> dict[str, float]:
    """Bounded slowdown and utilisation of a general-core run, defined as the protocol does."""
    ran = [o for o in result.outcomes if not o.rejected and o.start == o.start]
    submit = np.array([o.submit for o in ran])
    start = np.array([o.start for o in ran])
    run = np.array([o.runtime for o in ran])
    cpus = np.array([o.cpus for o in ran])
    wait = start - submit
    bsld = np.maximum(1.0, (wait + run) / np.maximum(run, BSLD_THRESHOLD_S))
    span = (start.max() - submit.min()) * max_procs
    summary = summarize(result.outcomes, result.total_cpus)
    return {
        "bsld": float(bsld.mean()),
        "utilization": float((run * cpus).sum() / span) if span else float("nan"),
        "utilization_to_last_end": summary.utilization,
        "avg_wait_s": float(wait.mean()),
        "backfilled": summary.backfilled,
        "rejected": summary.rejected,
    }


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run_general(path: Path) -> dict[str, Any]:
    def load() -> tuple[SwfTrace, Workload]:
        trace = load_swf(path)
        return trace, swf_workload(trace)

    gc.collect()
    (trace, workload), load_s = timed(load)
    config = CoreConfig(queue_order="fcfs", backfill="easy")
    result, sim_s = timed(lambda: Simulation(workload.nodes, workload.jobs, config).run())
    max_procs = trace.header.max_procs or workload.total_cpus
    return {
        "jobs": len(workload.jobs),
        "nodes": len(workload.nodes),
        "load_s": load_s,
        "simulate_s": sim_s,
        "total_s": load_s + sim_s,
        "cycles": result.cycles,
        "decisions": result.decisions,
        **protocol_metrics(result, max_procs),
    }


def run_baseline(path: Path) -> dict[str, Any]:
    gc.collect()
    jobs, load_s = timed(lambda: rlscheduler_jobs(load_swf(path)))
    seq, sim_s = timed(lambda: replay_whole_trace(jobs, "fcfs", True))
    return {
        "jobs": seq.jobs,
        "nodes": jobs.max_nodes,
        "load_s": load_s,
        "simulate_s": sim_s,
        "total_s": load_s + sim_s,
        "bsld": seq.avg_bounded_slowdown,
        "utilization": seq.utilization,
        "avg_wait_s": seq.avg_wait_s,
    }


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every timing field; the other fields are the same in every run."""
    out = dict(runs[0])
    for key in ("load_s", "simulate_s", "total_s"):
        out[key] = statistics.median(r[key] for r in runs)
        out[key + "_all"] = [r[key] for r in runs]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", choices=[*TRACES, "all"], default="all")
    parser.add_argument("--repeat", type=int, default=3, help="repeats (median reported)")
    parser.add_argument("--quick", action="store_true", help="one repeat")
    parser.add_argument("--traces-dir", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the results here")
    args = parser.parse_args()
    repeat = 1 if args.quick else max(1, args.repeat)
    names = list(TRACES) if args.trace == "all" else [args.trace]

    console = Console() if sys.stdout.isatty() else Console(width=160)
    info = machine()
    console.print(describe(info))
    results: list[dict[str, Any]] = []
    for name in names:
        path = args.traces_dir / TRACES[name]
        general: list[dict[str, Any]] = []
        baseline: list[dict[str, Any]] = []
        for i in range(repeat):
            general.append(run_general(path))
            baseline.append(run_baseline(path))
            console.print(
                f"  {name} repeat {i + 1}/{repeat}: general {general[-1]['total_s']:.2f} s, "
                f"baseline {baseline[-1]['total_s']:.2f} s",
                style="dim",
            )
        g, b = median_of(general), median_of(baseline)
        results.append(
            {
                "trace": name,
                "file": TRACES[name],
                "repeats": repeat,
                "general": g,
                "baseline": b,
                "ratio_total": g["total_s"] / b["total_s"],
                "ratio_simulate": g["simulate_s"] / b["simulate_s"],
                "target_s": TARGET_S[name],
                "meets_target": g["total_s"] < TARGET_S[name],
            }
        )

    table = Table(title=f"Whole-trace replay, FCFS + EASY (median of {repeat})")
    for col in (
        "trace",
        "jobs",
        "load s",
        "simulate s",
        "total s",
        "target s",
        "baseline total s",
        "general/baseline",
        "bsld general",
        "bsld baseline",
        "util general",
        "util baseline",
    ):
        table.add_column(col, justify="left" if col == "trace" else "right")
    for r in results:
        g, b = r["general"], r["baseline"]
        table.add_row(
            r["trace"],
            f"{g['jobs']:,}",
            f"{g['load_s']:.2f}",
            f"{g['simulate_s']:.2f}",
            f"{g['total_s']:.2f}",
            f"{r['target_s']:g}" + (" ✓" if r["meets_target"] else " ✗"),
            f"{b['total_s']:.2f}",
            f"{r['ratio_total']:.1f}×",
            f"{g['bsld']:.2f}",
            f"{b['bsld']:.2f}",
            f"{g['utilization']:.4f}",
            f"{b['utilization']:.4f}",
        )
    console.print(table)
    console.print(
        "The schedules differ by design: the baseline is the RLScheduler artifact's EASY "
        "(shadow time only, no extra-node rule, jobs take ⌈n/ppn⌉ whole nodes); the general "
        "core's EASY also backfills jobs that fit in what the head leaves at its reservation, "
        "and packs one-CPU tasks onto any node. Utilisation uses the protocol's definition "
        "(span up to the last start) for both.",
        style="dim",
    )
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "results": results}, indent=2) + "\n")
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
