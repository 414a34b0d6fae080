"""GPU placement speed under the FGD protocol: decisions per second per policy.

Two settings (issue 3's benchmark):

* the openb cluster itself (1,213 GPU nodes, 6,212 GPUs), seeds 42-51 of the default pod list,
  timed together for best-fit, FGD and fusesched's ``default`` (the issue asks for the three
  to finish together in under 2 minutes here);
* a cluster of about 10,000 nodes made of ``--scale`` copies of the openb node list, one seed,
  the pod list tuned to 130 % of that larger capacity as the protocol does.

A decision is one pod offered to the placement (placed or failed). FGD and ``default`` score
through an incremental index (``fusesched.policies.gpu_frag.FragIndex``: per-node fragmentation
counts and per-pod-shape cached scores, one node refreshed per placement), so a decision costs a
few vector operations over the nodes. Run:

    .venv/bin/python bench/gpu_placement_speed.py [--scale 8] [--policies best-fit,fgd,default]
        [--seeds 42-51] [--large-seed 42]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from fusesched.sim.protocols.fgd import DEFAULT_SEEDS, run_fgd
from fusesched.traces.openb import OpenbNodes, load_openb_nodes, load_openb_pods
from machine_info import describe, machine

OPENB = Path(__file__).resolve().parents[2] / "shared" / "traces" / "alibaba-gpu-v2023"


def scaled(nodes: OpenbNodes, copies: int) -> OpenbNodes:
    """``copies`` renamed copies of the node list, as one bigger cluster."""
    return replace(
        nodes,
        names=tuple(f"{name}-{k}" for k in range(copies) for name in nodes.names),
        cpu_milli=np.tile(nodes.cpu_milli, copies),
        memory_mib=np.tile(nodes.memory_mib, copies),
        gpus=np.tile(nodes.gpus, copies),
        model=nodes.model * copies,
    )


def measure(nodes: OpenbNodes, pods: Any, policy: str, seeds: tuple[int, ...]) -> dict[str, Any]:
    decisions = 0
    alloc = []
    t0 = time.perf_counter()
    for seed in seeds:
        run = run_fgd(nodes, pods, policy, seed)
        decisions += len(run.sequence)
        alloc.append(run.gpu_alloc_pct_at_130)
    seconds = time.perf_counter() - t0
    return {
        "nodes": len(nodes),
        "policy": policy,
        "seeds": len(seeds),
        "decisions": decisions,
        "seconds": seconds,
        "decisions_per_s": decisions / seconds,
        "gpu_alloc_pct_at_130": float(np.mean(alloc)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default="best-fit,fgd,default")
    parser.add_argument("--scale", type=int, default=8, help="copies of the openb node list")
    parser.add_argument("--seeds", default="42-51", help="seeds on the openb cluster (a-b)")
    parser.add_argument("--large-seed", type=int, default=42, help="the seed on the big cluster")
    parser.add_argument("--skip-large", action="store_true", help="only the openb cluster")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if not OPENB.exists():
        sys.exit(f"{OPENB} is absent: this benchmark needs ../shared")
    console = Console()
    info = machine()
    console.print(describe(info))
    nodes = load_openb_nodes(OPENB / "openb_node_list_gpu_node.csv")
    pods = load_openb_pods(OPENB / "openb_pod_list_default.csv")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    first, _, last = args.seeds.partition("-")
    try:
        seeds = tuple(range(int(first), int(last or first) + 1)) if args.seeds else DEFAULT_SEEDS
    except ValueError:
        parser.error(f"--seeds: expected FIRST-LAST or one seed, e.g. 42-51, not {args.seeds!r}")
    if not seeds:
        parser.error(f"--seeds: empty range {args.seeds!r}")
    results = []
    started = time.perf_counter()
    for policy in policies:
        results.append(measure(nodes, pods, policy, seeds))
        console.print(f"  {len(nodes):,} nodes {policy}: {results[-1]['seconds']:.1f} s")
    together = time.perf_counter() - started
    if not args.skip_large:
        big = scaled(nodes, args.scale)
        for policy in policies:
            results.append(measure(big, pods, policy, (args.large_seed,)))
            console.print(f"  {len(big):,} nodes {policy}: {results[-1]['seconds']:.1f} s")
    table = Table(title="GPU placement speed, FGD protocol (openb default pod list)")
    for name in ("nodes", "policy", "seeds", "decisions", "seconds", "decisions/s", "alloc @130"):
        table.add_column(name, justify="left" if name == "policy" else "right")
    for r in results:
        table.add_row(
            f"{r['nodes']:,}",
            r["policy"],
            str(r["seeds"]),
            f"{r['decisions']:,}",
            f"{r['seconds']:.1f}",
            f"{r['decisions_per_s']:,.0f}",
            f"{r['gpu_alloc_pct_at_130']:.2f}",
        )
    console.print(table)
    console.print(
        f"{', '.join(policies)} over seeds {args.seeds} on the openb cluster took {together:.1f} s "
        "together (issue 3: under 2 minutes)."
    )
    if args.json:
        args.json.write_text(
            json.dumps({"machine": info, "together_s": together, "results": results}, indent=2)
        )
        console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
