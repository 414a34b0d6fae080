"""Deep-learning scheduling without known durations: all DL policies side by side, one run.

Traces: the Philly job list (``shared/traces/philly/philly.csv``) and each ITP cluster
(``shared/traces/microsoft-itp-elasticflow/raw-traces/clusterNN.csv``). Every trace is replayed
through the DL protocol (:mod:`fusesched.sim.dl`) under every policy on the same cluster, sized
by the documented load rule (:func:`fusesched.sim.dl.workloads.sized_cluster`). Writes
``results.json``, ``avg_jct.png`` (average JCT per policy and trace, relative to FIFO) and
``table.md`` into ``--out``.

Run: ``nice -n 10 .venv/bin/python bench/dl_sched.py --out docs/figures/dl``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from cli_args import day_window
from fusesched.policies.dl_registry import DL_POLICIES, make_dl_policy
from fusesched.sim.dl.model import DlJob
from fusesched.sim.dl.runner import run_dl
from fusesched.sim.dl.workloads import (
    DEFAULT_LOAD,
    itp_dl_jobs,
    offered_gpus,
    philly_dl_jobs,
    sized_cluster,
)
from fusesched.traces.itp import itp_cluster_files, load_itp_jobs
from fusesched.traces.philly import load_philly_jobs

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DEFAULT_POLICIES = "fifo,sjf-oracle,las,tiresias-2q,tiresias,tiresias-mig,gittins,gittins-burst"
OURS, FIFO, TIRESIAS, TIRESIAS_MIG = "gittins", "fifo", "tiresias", "tiresias-mig"


def traces(args: argparse.Namespace) -> list[tuple[str, list[DlJob]]]:
    out: list[tuple[str, list[DlJob]]] = []
    if "philly" in args.traces:
        window = None if args.philly_window == "all" else day_window(args.philly_window)
        jobs = load_philly_jobs(args.shared / "traces" / "philly" / "philly.csv")
        out.append(("philly", philly_dl_jobs(jobs, window)))
    if args.traces == ["philly"]:
        return out
    files = itp_cluster_files(args.shared / "traces" / "microsoft-itp-elasticflow" / "raw-traces")
    for name, path in files.items():
        if "itp" in args.traces or name in args.traces:
            out.append((f"itp-{name}", itp_dl_jobs(load_itp_jobs(path), name)))
    return out


def _philly_window(text: str) -> str:
    if text != "all":
        day_window(text)
    return text


def run_trace(name: str, jobs: list[DlJob], policies: list[str], load: float) -> dict[str, Any]:
    cluster = sized_cluster(jobs, load=load)
    durations = np.array([j.duration_s for j in jobs])
    entry: dict[str, Any] = {
        "trace": name,
        "jobs": len(jobs),
        "gpu_hours": float(sum(j.duration_s * j.gpus for j in jobs) / 3600),
        "offered_gpus": offered_gpus(jobs),
        "cluster": {
            "nodes": cluster.nodes,
            "gpus_per_node": cluster.gpus_per_node,
            "total_gpus": cluster.total_gpus,
            "checkpoint_s": cluster.checkpoint_s,
            "restart_s": cluster.restart_s,
            "spread_speed": cluster.spread_speed,
            "tick_s": cluster.tick_s,
        },
        "results": {},
    }
    print(
        f"{name}: {len(jobs):,} jobs, offered {entry['offered_gpus']:.1f} GPUs, "
        f"{cluster.nodes} nodes x {cluster.gpus_per_node} GPUs",
        flush=True,
    )
    for policy in policies:
        result = run_dl(jobs, cluster, make_dl_policy(policy, durations))
        metrics = result.metrics()
        entry["results"][policy] = metrics
        print(
            f"  {policy:12s} avg JCT {metrics['avg_jct_s'] / 3600:9.2f} h  "
            f"p99 {metrics['p99_jct_s'] / 3600:9.1f} h  preemptions {metrics['preemptions']:7d}"
            f"  ({metrics['wall_s']:.1f} s)",
            flush=True,
        )
    res = entry["results"]
    if OURS in res:
        ours = res[OURS]["avg_jct_s"]
        entry["ratios"] = {
            f"{other}/{OURS}": res[other]["avg_jct_s"] / ours for other in res if other != OURS
        }
    return entry


def table(entries: list[dict[str, Any]], policies: list[str]) -> str:
    head = "| trace | jobs | GPUs | " + " | ".join(policies)
    head += " | FIFO / ours | Tiresias / ours | Tiresias-mig / ours |\n"
    head += "|---" * (len(policies) + 6) + "|\n"
    rows = []
    for e in entries:
        res = e["results"]
        cells = [f"{res[p]['avg_jct_s'] / 3600:.2f}" for p in policies]
        ratios = e.get("ratios", {})
        fifo = ratios.get(f"{FIFO}/{OURS}")
        tir = ratios.get(f"{TIRESIAS}/{OURS}")
        mig = ratios.get(f"{TIRESIAS_MIG}/{OURS}")
        fifo_text = "" if fifo is None else f"{fifo:.2f}×"
        tir_text = "" if tir is None else f"{tir:.3f}×"
        mig_text = "" if mig is None else f"{mig:.3f}×"
        rows.append(
            f"| {e['trace']} | {e['jobs']:,} | {e['cluster']['total_gpus']} | "
            + " | ".join(cells)
            + f" | {fifo_text} | {tir_text} | {mig_text} |"
        )
    return head + "\n".join(rows) + "\n"


def plot(path: Path, entries: list[dict[str, Any]], policies: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [e["trace"] for e in entries]
    width = 0.8 / len(policies)
    fig, ax = plt.subplots(figsize=(max(8.0, 1.1 * len(names)), 4.8))
    for k, policy in enumerate(policies):
        values = [
            e["results"][policy]["avg_jct_s"] / e["results"][FIFO]["avg_jct_s"]
            if FIFO in e["results"]
            else e["results"][policy]["avg_jct_s"] / 3600
            for e in entries
        ]
        xs = np.arange(len(names)) + (k - (len(policies) - 1) / 2) * width
        ax.bar(xs, values, width, label=policy)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("average JCT relative to FIFO (log; lower is better)")
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=0.8)
    ax.grid(axis="y", alpha=0.3, which="both")
    ax.legend(fontsize=8, ncol=3)
    ax.set_title("DL scheduling without known durations — average JCT / FIFO (one run)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "dl")
    parser.add_argument("--policies", default=DEFAULT_POLICIES)
    parser.add_argument("--load", type=float, default=DEFAULT_LOAD)
    parser.add_argument(
        "--traces",
        default="philly,itp",
        help="comma separated: philly, itp (all ITP clusters) or clusterNN",
    )
    parser.add_argument(
        "--philly-window",
        default="all",
        type=_philly_window,
        help="'all' or START:END in days, e.g. 14:42",
    )
    args = parser.parse_args(argv)
    if not args.load > 0:
        parser.error(f"--load must be above 0, not {args.load:g}")
    args.traces = [t.strip() for t in args.traces.split(",") if t.strip()]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in DL_POLICIES]
    if unknown:
        parser.error(f"unknown policy {unknown[0]!r}; choose from {', '.join(DL_POLICIES)}")
    if not (args.shared / "traces").is_dir():
        print(f"{args.shared}/traces is absent: nothing to run", file=sys.stderr)
        return 2
    itp_dir = args.shared / "traces" / "microsoft-itp-elasticflow" / "raw-traces"
    try:
        clusters = list(itp_cluster_files(itp_dir))
    except ValueError:  # no ITP folder here: only philly can run
        clusters = []
    known = ["philly", "itp", *clusters]
    unknown = [t for t in args.traces if t not in known]
    if unknown or not args.traces:
        what = f"unknown trace {unknown[0]!r}" if unknown else "none given"
        parser.error(f"--traces: {what}; choose from {', '.join(known)}")
    try:
        workloads = traces(args)
    except (OSError, ValueError) as exc:  # a missing or malformed trace, an empty window
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    entries = [run_trace(name, jobs, policies, args.load) for name, jobs in workloads]
    elapsed = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": "bench/dl_sched.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "load": args.load,
        "philly_window": args.philly_window,
        "policies": policies,
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
        },
        "elapsed_s": elapsed,
        "traces": entries,
    }
    (args.out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.out / "table.md").write_text(table(entries, policies))
    plot(args.out / "avg_jct.png", entries, policies)
    print(table(entries, policies))
    print(f"{elapsed:.0f} s; wrote {args.out}/results.json, table.md, avg_jct.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
