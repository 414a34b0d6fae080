"""Data-aware placement in the simulator, on the Philly GPU trace with a dataset model.

Philly has no dataset information, so each job is given one dataset drawn by Zipf popularity
(exponent 1.1 over 200 datasets, sizes log-uniform 1 GiB – 500 GiB, seeded); see docs/DATA.md
for the transfer model. Side by side, in one run, on the same jobs and cluster:

* ``no-cache``   — every pass over the data streams from shared storage (the status quo);
* ``cache``      — LRU node caches, placement ignores where data is (weight 0);
* ``data-aware`` — the same caches, placement prefers nodes holding the data (weight 1);
* ``data-aware+wait`` — and a job may wait up to ``--wait`` seconds for such a node.

Run: ``.venv/bin/python bench/data_sim.py [--window 28:42] [--seed 1] [--out docs/figures/data]``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from cli_args import day_window
from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.node import LABEL_POOL, NodeSpec
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig
from fusesched.sim.data import DataModel, DataSim, assign_datasets, zipf_datasets
from fusesched.sim.engine import SimJob, Simulation
from fusesched.traces.philly import load_philly_jobs, task_shape
from machine_info import describe, machine

ROOT = Path(__file__).resolve().parents[1]
PHILLY = ROOT.parent / "shared" / "traces" / "philly" / "philly.csv"
DAY = 86_400.0
TIB = 2**40


def workload(
    window: tuple[float, float], util: float, gpus_per_node: int, datasets: int, seed: int
) -> tuple[tuple[NodeSpec, ...], list[SimJob], str]:
    lo, hi = window[0] * DAY, window[1] * DAY
    raw = [j for j in load_philly_jobs(PHILLY) if lo <= j.submit_s < hi]
    if not raw:
        raise ValueError(f"no Philly jobs submitted in days {window[0]:g}-{window[1]:g}")
    offered = sum(max(j.duration_s, 1.0) * j.gpus for j in raw) / (hi - lo)
    largest = max(math.ceil(j.gpus / gpus_per_node) for j in raw)
    count = max(math.ceil(offered / util / gpus_per_node), largest)
    res = Resources.parse({"cpu": 64, "memory": "512Gi", "nvidia.com/gpu": gpus_per_node})
    nodes = tuple(NodeSpec(f"g{i:04d}", res, {LABEL_POOL: "gpu"}) for i in range(count))
    specs = []
    for j in raw:
        tasks, per = task_shape(j.gpus, gpus_per_node)
        group = TaskGroup("main", tasks, Resources.parse({"cpu": 1, "nvidia.com/gpu": per}))
        runtime = max(j.duration_s, 1.0)
        specs.append(
            JobSpec(f"p{j.line}", (group,), walltime_s=runtime, submit_time=j.submit_s - lo)
        )
    specs = assign_datasets(specs, zipf_datasets(datasets, seed), seed)
    jobs = [SimJob(s, s.walltime_s or 1.0) for s in specs]
    desc = (
        f"philly.csv days {window[0]:g}-{window[1]:g}: {len(jobs):,} jobs on {count} nodes x "
        f"{gpus_per_node} GPUs (offered load {util:.0%}), {datasets} datasets"
    )
    return nodes, jobs, desc


def run(
    name: str,
    nodes: tuple[NodeSpec, ...],
    jobs: list[SimJob],
    model: DataModel,
    weight: float,
    wait_s: float,
) -> dict[str, Any]:
    config = CoreConfig(
        placement="best-fit", data_locality_weight=weight, data_locality_wait_s=wait_s
    )
    data = DataSim(model)
    started = time.perf_counter()
    result = Simulation(nodes, jobs, config, data=data).run()
    ran = [o for o in result.outcomes if not o.rejected]
    jct = np.array([o.end - o.submit for o in ran])
    wait = np.array([o.start - o.submit for o in ran])
    rep = data.report
    reads = rep.hits + rep.misses
    return {
        "policy": name,
        "jobs": len(ran),
        "shared_tib": rep.shared_bytes / TIB,
        "local_tib": rep.local_bytes / TIB,
        "hit_rate": rep.hits / reads if reads else 0.0,
        "evictions": rep.evictions,
        "mean_jct_h": float(jct.mean()) / 3600,
        "mean_wait_h": float(wait.mean()) / 3600,
        "p95_wait_h": float(np.percentile(wait, 95)) / 3600,
        "io_hours": rep.io_seconds / 3600,
        "caches_within_capacity": data.within_capacity(),
        "seconds": time.perf_counter() - started,
    }


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["policy"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    panels = [
        ("shared_tib", "read from shared storage [TiB]"),
        ("mean_jct_h", "mean job completion time [h]"),
        ("hit_rate", "node reads served from cache"),
    ]
    for ax, (key, label) in zip(axes, panels, strict=True):
        bars = ax.bar(range(len(rows)), [r[key] for r in rows], color="#3b6ea8")
        ax.set_xticks(range(len(rows)), names, rotation=20, fontsize=8)
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--window", default="28:42", type=day_window, help="days of the Philly trace (from:to)"
    )
    p.add_argument("--util", type=float, default=0.7, help="offered GPU load of the cluster")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--datasets", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cache-tib", type=float, default=2.0, help="cache per node")
    p.add_argument("--passes", type=int, default=3, help="times a job reads its dataset")
    p.add_argument("--wait", type=float, default=600.0, help="locality wait (s)")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "data")
    args = p.parse_args(argv)
    if not args.util > 0:
        p.error(f"--util must be above 0, not {args.util:g}")
    if not PHILLY.exists():
        print(f"error: needs {PHILLY}", file=sys.stderr)
        return 2
    lo, hi = args.window
    info = machine()
    print(describe(info, markup=False), flush=True)
    try:
        nodes, jobs, desc = workload(
            (lo, hi), args.util, args.gpus_per_node, args.datasets, args.seed
        )
    except ValueError as exc:  # an empty window, a malformed trace row
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(desc, flush=True)
    cache = DataModel(mode="cache", cache_bytes=int(args.cache_tib * TIB), passes=args.passes)
    none = DataModel(mode="none", cache_bytes=0, passes=args.passes)
    cases = [
        ("no-cache", none, 0.0, 0.0),
        ("cache", cache, 0.0, 0.0),
        ("data-aware", cache, 1.0, 0.0),
        ("data-aware+wait", cache, 1.0, args.wait),
    ]
    rows = []
    for name, model, weight, wait in cases:
        row = run(name, nodes, jobs, model, weight, wait)
        rows.append(row)
        print(
            f"{name:16s} shared {row['shared_tib']:8.1f} TiB  hit {row['hit_rate']:.3f}  "
            f"JCT {row['mean_jct_h']:7.3f} h  wait {row['mean_wait_h']:.3f} h "
            f"(p95 {row['p95_wait_h']:.2f})  io {row['io_hours']:.0f} h  "
            f"caches ok {row['caches_within_capacity']}  {row['seconds']:.0f} s",
            flush=True,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "machine": info,
        "workload": desc,
        "args": vars(args) | {"out": str(args.out), "window": f"{lo:g}:{hi:g}"},
    }
    (args.out / "results.json").write_text(json.dumps(doc | {"rows": rows}, indent=1) + "\n")
    plot(rows, args.out / "data.png", desc)
    print(f"wrote {args.out / 'results.json'} and {args.out / 'data.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
