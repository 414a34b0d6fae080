"""Power-aware GPU placement on the openb trace: FGD, PWR+FGD and pwr-guard side by side.

Follows ``shared/anchors/pwr/PROTOCOL.md`` (PWR, CCGrid'25, a delta on the FGD protocol): the
1,213 GPU nodes, seeds 42-51, the same arrival sequence and node order for every policy, the
power model of section 2 recorded after every pod, each run resampled onto x = 0:0.005:1 of the
arrived GPU request, seed means, power savings vs FGD and GRAR. Runs stop right after arrived
reaches 100 % of capacity (nothing later enters a curve).

Writes to ``--out`` (default ``docs/figures/pwr``): ``curves.csv`` (seed-mean curves per policy),
``per_seed.csv`` (watts and used milli per run at each grid point), ``summary.json`` (machine,
run times, the comparison with the protocol's section 7.2 and the goal check of pwr-guard),
``power.png`` (power and savings against arrived load) and ``allocation.png`` (GRAR against
arrived load). Run:

    nice -n 10 .venv/bin/python bench/pwr_openb.py [--pods default] [--seeds 42-51]
        [--policies fgd,pwr,pwr+fgd,pwr+fgd-100,pwr+fgd-50,pwr-guard-v1,pwr-guard]
        [--out docs/figures/pwr]
        [--tag PREFIX]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from fusesched.policies.gpu_frag import GPU_MILLI, MAX_GPUS
from fusesched.policies.gpu_power import POWER_POLICIES, NodePower
from fusesched.sim.protocols.pwr import GRID, PwrResult, run_pwr, savings_pct
from fusesched.traces.openb import OpenbNodes, OpenbPods, load_openb_nodes, load_openb_pods
from machine_info import describe, machine

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT.parent / "shared" / "traces" / "alibaba-gpu-v2023"

#: The protocol's section 7.2 (Default trace), read off the paper's figures (± 0.3 point,
#: ± 0.002 GRAR; "≈" values taken at their midpoint). Keys are our policy names.
PAPER_SAVINGS: dict[str, dict[float, float]] = {
    "pwr": {0.10: 13.6, 0.14: 16.2, 0.20: 15.5, 0.30: 14.9, 0.50: 14.1, 0.78: 13.6,
            0.85: 9.3, 0.92: 4.0, 1.00: 7.5},
    "pwr+fgd": {0.10: 13.7, 0.14: 16.2, 0.20: 14.95, 0.30: 14.2, 0.50: 13.6, 0.78: 13.5,
                0.85: 9.2, 0.92: 3.1, 1.00: 5.0},
    "pwr+fgd-100": {0.10: 11.6, 0.14: 14.6, 0.20: 14.4, 0.30: 14.2, 0.50: 13.3, 0.78: 13.1,
                    0.85: 9.4, 0.92: 3.2, 1.00: 4.8},
    "pwr+fgd-50": {0.10: 11.7, 0.14: 14.6, 0.20: 14.5, 0.30: 14.2, 0.50: 13.5, 0.78: 13.1,
                   0.85: 9.1, 0.92: 3.6, 1.00: 5.1},
}  # fmt: skip
PAPER_GRAR: dict[str, dict[float, float]] = {
    "fgd": {0.95: 0.999, 0.97: 0.9815, 0.99: 0.962, 1.00: 0.952},
    "pwr+fgd-100": {0.95: 0.977, 0.97: 0.957, 0.99: 0.938, 1.00: 0.928},
    "pwr+fgd": {0.95: 0.976, 0.97: 0.956, 0.99: 0.937, 1.00: 0.928},
    "pwr+fgd-50": {0.95: 0.974, 0.97: 0.954, 0.99: 0.935, 1.00: 0.926},
    "pwr": {0.95: 0.951, 0.97: 0.931, 0.99: 0.913, 1.00: 0.904},
}
#: FGD's datacenter power in the paper's Fig. 1 (Default), read off the figure (MW).
PAPER_FGD_MW = {0.0: 0.23, 1.0: 1.38}
SHOW_X = (0.0, 0.10, 0.14, 0.20, 0.30, 0.50, 0.78, 0.85, 0.92, 0.95, 0.97, 0.99, 1.00)


def _at(x: float) -> int:
    return round(x / 0.005)


def _seeds(text: str) -> list[int]:
    first, _, last = text.partition("-")
    return list(range(int(first), int(last or first) + 1))


def run_all(
    policies: list[str], seeds: list[int], nodes: OpenbNodes, pods: OpenbPods
) -> tuple[dict[str, PwrResult], dict[str, float]]:
    results: dict[str, PwrResult] = {}
    seconds: dict[str, float] = {}
    total = len(policies) * len(seeds)
    done = 0
    for policy in policies:
        runs = []
        t0 = time.perf_counter()
        for seed in seeds:
            t1 = time.perf_counter()
            runs.append(run_pwr(nodes, pods, policy, seed, until=1.0))
            done += 1
            print(
                f"  [{done}/{total}] {policy} seed {seed}: {len(runs[-1].power_w):,} pods, "
                f"{time.perf_counter() - t1:.1f} s",
                flush=True,
            )
        seconds[policy] = time.perf_counter() - t0
        results[policy] = PwrResult(policy, tuple(runs))
    return results, seconds


def goal_check(res: dict[str, PwrResult], own: str, refs: list[str]) -> dict[str, Any]:
    """pwr-guard's goal: power ≤ each PWR+FGD mix and used ≥ FGD, point-wise on seed means."""
    mine, fgd = res[own], res["fgd"]
    used_gap = (mine.used - fgd.used) / 1000.0  # GPUs
    out: dict[str, Any] = {
        "allocation_vs_fgd": {
            "points_at_least_fgd": int((used_gap >= -1e-9).sum()),
            "points": len(GRID),
            "worst_gpus": float(used_gap.min()),
            "worst_at_x": float(GRID[int(np.argmin(used_gap))]),
            "grar_at_1": float(mine.grar[-1]),
            "fgd_grar_at_1": float(fgd.grar[-1]),
        }
    }
    for ref in refs:
        excess = mine.power - res[ref].power
        out[f"power_vs_{ref}"] = {
            "points_at_most_ref": int((excess <= 1e-9).sum()),
            "points": len(GRID),
            "worst_excess_w": float(excess.max()),
            "worst_at_x": float(GRID[int(np.argmax(excess))]),
            "first_x_above": (
                float(GRID[int(np.argmax(excess > 1e-9))]) if (excess > 1e-9).any() else None
            ),
        }
    return out


def end_state(res: dict[str, PwrResult], nodes: OpenbNodes, pods: OpenbPods) -> dict[str, Any]:
    """Where each policy's watts are at the end of its runs (x = 1), seed means, by GPU model.

    Per model: fully free GPUs (each draws idle watts, not TDP), the free milli-GPU left in
    partly used GPUs (fragments), and the CPU and GPU watts of those nodes; plus GPUs allocated.
    Rebuilt from each run's placements.
    """
    models = np.array(nodes.model)
    names = sorted({m for m, g in zip(models, nodes.gpus, strict=True) if g > 0})
    slots = np.arange(MAX_GPUS)[None, :] < nodes.gpus[:, None]
    power = NodePower.of(nodes.cpu_milli, nodes.gpus, nodes.model)
    out: dict[str, Any] = {}
    for name, r in res.items():
        acc: dict[str, dict[str, list[float]]] = {m: {} for m in names}
        for run in r.runs:
            free_gpu = np.where(slots, GPU_MILLI, 0).astype(np.int64)
            free_cpu = nodes.cpu_milli.astype(np.int64).copy()
            b = run.base
            for step in np.flatnonzero(b.node >= 0):
                p, n = int(b.sequence[step]), int(b.node[step])
                free_cpu[n] -= int(pods.cpu_milli[p])
                free_gpu[n, b.gpus[step]] -= int(pods.gpu_milli[p])
            cpu_w, gpu_w = power.cpu(free_cpu), power.gpu(free_gpu)
            for m in names:
                rows = models == m
                f = free_gpu[rows][slots[rows]]
                for key, value in (
                    ("gpus", float(slots[rows].sum())),
                    ("fully_free", float((f == GPU_MILLI).sum())),
                    ("fragment_gpus", float(f[f < GPU_MILLI].sum()) / GPU_MILLI),
                    ("cpu_kw", float(cpu_w[rows].sum()) / 1e3),
                    ("gpu_kw", float(gpu_w[rows].sum()) / 1e3),
                ):
                    acc[m].setdefault(key, []).append(value)
        out[name] = {
            "used_gpus": float(np.mean([x.base.allocated_milli[-1] for x in r.runs])) / 1e3,
            "power_kw": float(np.mean([x.power_w[-1] for x in r.runs])) / 1e3,
            "by_model": {
                m: {k: round(float(np.mean(v)), 1) for k, v in acc[m].items()} for m in names
            },
        }
    return out


def write_csv(out: Path, res: dict[str, PwrResult], tag: str = "") -> None:
    fgd = res["fgd"].power
    with (out / f"{tag}curves.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            ["policy", "x", "power_w", "power_cpu_w", "power_gpu_w", "used_milli",
             "arrived_milli", "grar", "savings_vs_fgd_pct"]
        )  # fmt: skip
        for name, r in res.items():
            sav = savings_pct(fgd, r.power)
            cpu, gpu, used, arr, grar = r.cpu_power, r.gpu_power, r.used, r.arrived, r.grar
            for i, x in enumerate(GRID):
                w.writerow(
                    [name, f"{x:.3f}", f"{r.power[i]:.1f}", f"{cpu[i]:.1f}", f"{gpu[i]:.1f}",
                     f"{used[i]:.1f}", f"{arr[i]:.1f}", f"{grar[i]:.5f}", f"{sav[i]:.3f}"]
                )  # fmt: skip
    with (out / f"{tag}per_seed.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["policy", "seed", "x", "power_w", "used_milli", "arrived_milli"])
        for name, r in res.items():
            for run in r.runs:
                p, u, a = run.power_curve, run.used_curve, run.arrived_curve
                for i, x in enumerate(GRID):
                    w.writerow([name, run.base.seed, f"{x:.3f}", f"{p[i]:.1f}", f"{u[i]:.1f}",
                                f"{a[i]:.1f}"])  # fmt: skip


def plot(out: Path, res: dict[str, PwrResult], title: str, tag: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fgd = res["fgd"].power
    colour = {name: f"C{i}" for i, name in enumerate(res)}  # one colour per policy everywhere
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6))
    for name, r in res.items():
        ax.plot(GRID, r.power / 1e6, label=name, linewidth=1.2, color=colour[name])
        if name != "fgd":
            sav = savings_pct(fgd, r.power)
            bx.plot(GRID, sav, label=name, linewidth=1.2, color=colour[name])
        paper = PAPER_SAVINGS.get(name)
        if paper:  # section 7.2's values, read off the paper's figure
            bx.scatter(list(paper), list(paper.values()), marker="x", s=18, color=colour[name])
    ax.set_xlabel("arrived GPU request (fraction of GPU capacity)")
    ax.set_ylabel("datacenter power (MW)")
    ax.set_title("power against arrived load (seed means)", fontsize=10)
    bx.axhline(0, color="grey", linewidth=0.8)
    bx.set_xlabel("arrived GPU request (fraction of GPU capacity)")
    bx.set_ylabel("power savings vs FGD (%)")
    bx.set_title("savings vs FGD = (P_FGD − P)/P_FGD; × = paper (section 7.2)", fontsize=10)
    for a in (ax, bx):
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
        a.set_xlim(0, 1)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{tag}power.png", dpi=120)
    plt.close(fig)

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.6))
    for name, r in res.items():
        capacity = r.runs[0].base.total_gpus * 1000
        ax.plot(GRID, r.used / capacity, label=name, color=colour[name])
        bx.plot(GRID, r.grar, label=name, marker=".", markersize=3, color=colour[name])
    ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle=":")
    ax.set_ylabel("GPUs allocated (fraction of capacity)")
    ax.set_title("GPU allocation against arrived load", fontsize=10)
    bx.set_xlim(0.88, 1.0)
    bx.set_ylabel("GRAR = mean used / mean arrived")
    bx.set_title("GRAR, right end (zoom)", fontsize=10)
    for a in (ax, bx):
        a.set_xlabel("arrived GPU request (fraction of GPU capacity)")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out / f"{tag}allocation.png", dpi=120)
    plt.close(fig)


def compare(res: dict[str, PwrResult]) -> dict[str, Any]:
    """Savings, their seed sd, and GRAR at the protocol's x points, beside section 7.2."""
    fgd = res["fgd"]
    rows: dict[str, Any] = {}
    for name, r in res.items():
        per_seed = np.array(
            [
                savings_pct(f.power_curve, m.power_curve)
                for f, m in zip(fgd.runs, r.runs, strict=True)
            ]
        )
        sav = savings_pct(fgd.power, r.power)
        rows[name] = {
            f"{x:.2f}": {
                "power_w": round(float(r.power[_at(x)]), 1),
                "savings_pct": round(float(sav[_at(x)]), 2),
                "savings_seed_sd": round(float(per_seed[:, _at(x)].std(ddof=1)), 2)
                if len(per_seed) > 1
                else None,
                "paper_savings_pct": PAPER_SAVINGS.get(name, {}).get(round(x, 2)),
                "grar": round(float(r.grar[_at(x)]), 4),
                "paper_grar": PAPER_GRAR.get(name, {}).get(round(x, 2)),
            }
            for x in SHOW_X
        }
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", default="default", help="openb pod list short name")
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument(
        "--policies",
        default="fgd,pwr,pwr+fgd,pwr+fgd-100,pwr+fgd-50,pwr-guard-v1,pwr-guard",
    )
    parser.add_argument("--own", default="pwr-guard", help="the policy checked against the goal")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "pwr")
    parser.add_argument("--tag", default="", help="prefix for the file names written")
    args = parser.parse_args()
    if not OPENB.exists():
        sys.exit(f"{OPENB} is absent: this benchmark needs ../shared")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POWER_POLICIES]
    if unknown or "fgd" not in policies:
        sys.exit(f"policies must include fgd and be among {', '.join(POWER_POLICIES)}")
    try:
        seeds = _seeds(args.seeds)
    except ValueError:
        parser.error(f"--seeds: expected FIRST-LAST or one seed, e.g. 42-51, not {args.seeds!r}")
    if not seeds:
        parser.error(f"--seeds: empty range {args.seeds!r}")
    pod_file = OPENB / f"openb_pod_list_{args.pods}.csv"
    if not pod_file.is_file():
        known = sorted(
            f.name[len("openb_pod_list_") : -4] for f in OPENB.glob("openb_pod_list_*.csv")
        )
        parser.error(f"--pods: no openb pod list {args.pods!r}; choose from {', '.join(known)}")
    info = machine()
    Console().print(describe(info))
    print(f"PWR protocol, openb {args.pods}, seeds {args.seeds}: {', '.join(policies)}", flush=True)
    started = time.perf_counter()
    nodes = load_openb_nodes(OPENB / "openb_node_list_gpu_node.csv")
    pods = load_openb_pods(pod_file)
    res, seconds = run_all(policies, seeds, nodes, pods)
    wall = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out, res, args.tag)
    title = f"PWR protocol, openb {args.pods}, seeds {args.seeds} (means)"
    plot(args.out, res, title, args.tag)
    table = compare(res)
    refs = [p for p in policies if p.startswith("pwr+fgd")]
    goal = goal_check(res, args.own, refs) if args.own in res else {}
    print("\nx:            " + " ".join(f"{x:7.2f}" for x in SHOW_X))
    print("FGD power kW: " + " ".join(f"{res['fgd'].power[_at(x)] / 1e3:7.1f}" for x in SHOW_X))
    for name in policies:
        row = table[name]
        print(f"{name:13s} " + " ".join(f"{row[f'{x:.2f}']['savings_pct']:7.2f}" for x in SHOW_X))
        paper = PAPER_SAVINGS.get(name)
        if paper:
            print(
                f"{'  paper':13s} "
                + " ".join(f"{paper[x]:7.2f}" if x in paper else "      –" for x in SHOW_X)
            )
    print("GRAR:")
    for name in policies:
        row = table[name]
        line = " ".join(f"{row[f'{x:.2f}']['grar']:7.4f}" for x in SHOW_X)
        print(f"{name:13s} {line}")
        paper_grar = PAPER_GRAR.get(name)
        if paper_grar:
            print(
                f"{'  paper':13s} "
                + " ".join(
                    f"{paper_grar[x]:7.4f}" if x in paper_grar else "      –" for x in SHOW_X
                )
            )
    print(json.dumps(goal, indent=2))
    ends = end_state(res, nodes, pods)
    print("at x = 1: power kW, GPUs used; per model fully free GPUs / fragments (GPUs)")
    for name, e in ends.items():
        per = "  ".join(
            f"{m} {v['fully_free']:.0f}/{v['fragment_gpus']:.0f}" for m, v in e["by_model"].items()
        )
        print(f"{name:13s} {e['power_kw']:7.1f} {e['used_gpus']:7.1f}  {per}")
    (args.out / f"{args.tag}summary.json").write_text(
        json.dumps(
            {
                "machine": info,
                "pods": args.pods,
                "seeds": seeds,
                "policies": policies,
                "seconds_per_policy": seconds,
                "wall_s": wall,
                "at_x": table,
                "goal": goal,
                "end_state": ends,
            },
            indent=2,
        )
        + "\n"
    )
    print(
        f"wrote {args.out}/{args.tag}"
        "{curves.csv, per_seed.csv, summary.json, power.png, allocation.png}"
    )
    print(f"total {wall:.1f} s")


if __name__ == "__main__":
    main()
