"""The learned queue order: trained on the selection traces, judged on traces it never saw.

Three stages, one run:

1. **Training** (skipped with ``--no-train``, which loads the shipped files instead): the
   cross-entropy method of ``fusesched.policies.learned.train`` for each λ, on sampled
   sequences (start seed 2) of the selection traces only — CTC-SP2, KTH-SP2, SDSC-Par, SDSC-DS,
   LLNL-Atlas, Sandia-Ross, LLNL-Thunder, NASA-iPSC (λ = 0: all eight, two 1,024-job sequences
   each, 96 candidates; λ > 0 needs the slower power model: CTC-SP2, KTH-SP2, SDSC-DS and
   NASA-iPSC, one sequence each, 48 candidates). The models are written to
   ``src/fusesched/policies/learned/`` (``learned.json`` is λ = 0, the one ``--policy learned``
   uses).
2. **Slowdown** on the evaluation traces (Lublin-1, SDSC-SP2, HPC2N, Lublin-2), RLScheduler
   protocol (ten 1,024-job sequences, seed 1): each learned model and the ``default`` preset
   through the general core, side by side with the five published heuristics re-run with the
   artifact's own loop (EASY), and the published RL agent's numbers (quoted).
3. **Trade-off front** on the first ``--energy-sequences`` protocol sequences of each
   evaluation trace, with Slurm-style power saving (idle-timeout) metering energy: each learned
   model, ``default`` and the five heuristics in the core (EASY; the heuristics on the
   requested times): average bounded slowdown, average wait and kWh.

Run: ``nice -n 10 .venv/bin/python bench/learned_policy.py [--no-train]
[--out docs/figures/learned]``. Writes ``results.json``, ``bsld.png`` and ``front.png``.
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

from fusesched.policies.learned.model import PREFIX, SHIPPED, LearnedModel, load_model, save_model
from fusesched.policies.learned.train import (
    Metrics,
    TrainSequence,
    TrainSpec,
    git_commit,
    run_sequence,
    train,
    training_sequences,
)
from fusesched.policies.presets import PRESETS
from fusesched.policies.registry import CoreConfig
from fusesched.sim.protocols.rlscheduler import (
    default_batch_job_slice,
    run_rlscheduler,
    sequence_starts,
)
from fusesched.sim.protocols.rlscheduler_core import run_core_protocol, sequence_jobs
from fusesched.sim.workload import homogeneous_nodes
from fusesched.traces.swf import load_swf, rlscheduler_jobs
from hpc_default import EVALUATION, HEURISTICS, PUBLISHED_BACKFILL
from machine_info import describe, machine

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PWA = "traces/pwa-swf/"
SELECTION = [
    PWA + "CTC-SP2-1996-3.1-cln.swf.gz",
    PWA + "KTH-SP2-1996-2.1-cln.swf.gz",
    PWA + "SDSC-Par-1996-3.1-cln.swf.gz",
    PWA + "SDSC-DS-2004-2.1-cln.swf.gz",
    PWA + "LLNL-Atlas-2006-2.1-cln.swf.gz",
    PWA + "Sandia-Ross-2001-1.1-cln.swf.gz",
    PWA + "LLNL-Thunder-2007-1.1-cln.swf.gz",
    PWA + "NASA-iPSC-1993-3.1-cln.swf.gz",
]
#: λ > 0 meters energy with the power model (slower): the smaller selection clusters only.
ENERGY_SELECTION = [SELECTION[i] for i in (0, 1, 3, 7)]
LAMBDAS = (0.0, 20.0, 50.0)
MODEL_DIR = SHIPPED.parent


def model_path(lam: float) -> Path:
    return SHIPPED if lam == 0 else MODEL_DIR / f"learned-lambda{lam:g}.json"


def train_spec(lam: float) -> tuple[list[str], int, TrainSpec]:
    """The training set-up of one λ: traces, sequences per trace, optimiser settings."""
    if lam == 0:
        return SELECTION, 2, TrainSpec(lam=0.0, budget=96, population=12, seed=0)
    return ENERGY_SELECTION, 1, TrainSpec(lam=lam, budget=48, population=8, seed=0)


def train_all(lambdas: list[float]) -> dict[str, Any]:
    info: dict[str, Any] = {}
    for lam in lambdas:
        traces, per_trace, spec = train_spec(lam)
        spec = TrainSpec(
            lam=spec.lam,
            budget=spec.budget,
            population=spec.population,
            seed=spec.seed,
            extra_meta={
                "git_commit": git_commit(ROOT),
                "command": "bench/learned_policy.py",
                "sequence_seed": 2,
            },
        )
        seqs = training_sequences([SHARED / t for t in traces], per_trace, seed=2)
        start = time.perf_counter()

        def report(done: int, total: int, best: float, lam: float = lam) -> None:
            if done % 12 == 0 or done == total:
                print(f"  λ={lam:g}: {done}/{total} candidates, best J {best:+.4f}", flush=True)

        model = train(seqs, spec, report)
        seconds = time.perf_counter() - start
        save_model(model, model_path(lam))
        info[f"{lam:g}"] = {"seconds": seconds, "file": str(model_path(lam).relative_to(ROOT))}
        print(f"λ={lam:g}: trained in {seconds:.0f} s -> {model_path(lam)}", flush=True)
    return info


def seed_check(seeds: list[int], out: Path, retrain: bool) -> dict[str, Any]:
    """λ = 0 trained again with other optimiser seeds (same data and budget; not shipped):
    how much of the result is the search's luck. Judged on the evaluation traces."""
    traces, per_trace, base = train_spec(0.0)
    seqs = training_sequences([SHARED / t for t in traces], per_trace, seed=2) if retrain else []
    result: dict[str, Any] = {}
    for seed in seeds:
        path = out / f"learned-seed{seed}.json"
        if retrain or not path.is_file():
            if not seqs:
                seqs = training_sequences([SHARED / t for t in traces], per_trace, seed=2)
            spec = TrainSpec(lam=0.0, budget=base.budget, population=base.population, seed=seed)
            save_model(train(seqs, spec), path)
        model = load_model(path)
        config = CoreConfig(
            queue_order=PREFIX + str(path),
            backfill=model.backfill,
            runtime_prediction=model.runtime_prediction,
        )
        row: dict[str, Any] = {
            "weights": list(model.weights),
            "train_J": model.meta["training"]["best_J"],
        }
        for name, rel in EVALUATION.items():
            jobs = rlscheduler_jobs(load_swf(SHARED / rel))
            slice_ = default_batch_job_slice(SHARED / rel)
            res = run_core_protocol(jobs, config, f"seed {seed}", batch_job_slice=slice_)
            row[name] = res.mean_bounded_slowdown
        result[str(seed)] = row
        print(
            f"seed {seed}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k in EVALUATION)
        )
    return result


def learned_config(lam: float, model: LearnedModel) -> CoreConfig:
    return CoreConfig(
        queue_order=PREFIX + str(model_path(lam)),
        backfill=model.backfill,
        runtime_prediction=model.runtime_prediction,
    )


def candidates(models: dict[float, LearnedModel]) -> dict[str, CoreConfig]:
    """Every policy judged in the core: learned models, default, heuristics (EASY)."""
    out = {f"learned λ={lam:g}": learned_config(lam, m) for lam, m in models.items()}
    out["default"] = PRESETS["default"].config()
    for order in HEURISTICS:
        out[order] = CoreConfig(queue_order=order, backfill="easy")
    return out


def slowdown(models: dict[float, LearnedModel]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    core = {k: v for k, v in candidates(models).items() if k.startswith(("learned", "default"))}
    for name, rel in EVALUATION.items():
        path = SHARED / rel
        jobs = rlscheduler_jobs(load_swf(path))
        slice_ = default_batch_job_slice(path)
        row: dict[str, Any] = {"published": PUBLISHED_BACKFILL[name]}
        row["protocol_rerun"] = {
            p: run_rlscheduler(jobs, p, True, batch_job_slice=slice_).mean_bounded_slowdown
            for p in HEURISTICS
        }
        row["core"] = {}
        for label, config in core.items():
            res = run_core_protocol(jobs, config, label, batch_job_slice=slice_)
            row["core"][label] = {
                "bsld": res.mean_bounded_slowdown,
                "per_sequence": [s.avg_bounded_slowdown for s in res.sequences],
            }
        out[name] = row
        cells = ", ".join(f"{k} {v['bsld']:.1f}" for k, v in row["core"].items())
        print(f"{name}: {cells}", flush=True)
    return out


def front(models: dict[float, LearnedModel], count: int) -> dict[str, Any]:
    configs = candidates(models)
    out: dict[str, Any] = {}
    for name, rel in EVALUATION.items():
        path = SHARED / rel
        jobs = rlscheduler_jobs(load_swf(path))
        eligible = default_batch_job_slice(path) or len(jobs)
        nodes = homogeneous_nodes(jobs.max_nodes, jobs.max_procs)
        starts = sequence_starts(eligible, seed=1)[:count]
        seqs = [TrainSequence(name, s, nodes, tuple(sequence_jobs(jobs, s, 1024))) for s in starts]
        row: dict[str, Any] = {}
        for label, config in configs.items():
            ms: list[Metrics] = [run_sequence(seq, config, energy=True) for seq in seqs]
            row[label] = {
                "bsld": float(np.mean([m.bsld for m in ms])),
                "wait_s": float(np.mean([m.wait_s for m in ms])),
                "kwh": float(np.mean([m.kwh for m in ms])),
            }
        out[name] = row
        cells = ", ".join(f"{k} {v['bsld']:.1f}/{v['kwh']:.0f}" for k, v in row.items())
        print(f"{name} (bsld/kWh): {cells}", flush=True)
    return out


def verdict(result: dict[str, Any], lam: float = 0.0) -> dict[str, Any]:
    """The learned model replaces ``default`` only if it is better on every evaluation trace."""
    label = f"learned λ={lam:g}"
    ratios = {
        name: row["core"][label]["bsld"] / row["core"]["default"]["bsld"]
        for name, row in result.items()
    }
    geo = math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios))
    return {
        "ratio_to_default": ratios,
        "geometric_mean_ratio": geo,
        "wins_everywhere": all(r < 1.0 for r in ratios.values()),
    }


def plot(out: Path, result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["slowdown"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.4 * len(names), 4.4))
    for ax, name in zip(axes, names, strict=True):
        row = result["slowdown"][name]
        labels = [*HEURISTICS, "RL (pub.)", *row["core"]]
        values = [
            *(row["protocol_rerun"][p] for p in HEURISTICS),
            row["published"]["rl"],
            *(v["bsld"] for v in row["core"].values()),
        ]
        colors = ["#9aa7b8"] * len(HEURISTICS) + ["#c98b3b"]
        colors += ["#3b6fc9" if k.startswith("learned") else "#2f6f3e" for k in row["core"]]
        bars = ax.bar(range(len(values)), values, color=colors)
        ax.set_yscale("log")
        ax.set_xticks(range(len(values)), labels, rotation=50, fontsize=7, ha="right")
        ax.bar_label(bars, fmt="%.0f", fontsize=6)
        ax.set_title(f"{name} (EASY)", fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("avg bounded slowdown, 10 sequences (log)")
    fig.suptitle("Learned queue order vs default vs heuristics (traces unseen in training)")
    fig.tight_layout()
    fig.savefig(out / "bsld.png", dpi=120)
    plt.close(fig)

    names = list(result["front"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.4 * len(names), 4.2))
    for ax, name in zip(axes, names, strict=True):
        row = result["front"][name]
        for label, m in row.items():
            color = "#3b6fc9" if label.startswith("learned") else "#9aa7b8"
            color = "#2f6f3e" if label == "default" else color
            ax.scatter(m["kwh"] / 1000.0, m["bsld"], color=color, s=30)
            ax.annotate(label, (m["kwh"] / 1000.0, m["bsld"]), fontsize=6)
        ax.set_yscale("log")
        ax.set_xlabel("energy, MWh per 1,024-job sequence")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("avg bounded slowdown (power saving on, log)")
    fig.suptitle("Slowdown vs energy under idle-timeout power saving")
    fig.tight_layout()
    fig.savefig(out / "front.png", dpi=120)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-train", action="store_true", help="load the shipped models")
    parser.add_argument("--lambdas", default=",".join(f"{x:g}" for x in LAMBDAS))
    parser.add_argument("--energy-sequences", type=int, default=3)
    parser.add_argument(
        "--seed-check",
        default="1,2",
        help="optimiser seeds to train λ = 0 again with (comma-separated; '' for none)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "learned")
    args = parser.parse_args()
    if not SHARED.is_dir():
        print("../shared is absent: nothing to measure", file=sys.stderr)
        return 1
    lambdas = [float(x) for x in args.lambdas.split(",") if x.strip()]
    info = machine()
    print(describe(info), flush=True)
    start = time.perf_counter()
    result: dict[str, Any] = {"machine": info, "lambdas": lambdas}
    result["training"] = {} if args.no_train else train_all(lambdas)
    models = {lam: load_model(model_path(lam)) for lam in lambdas}
    result["models"] = {
        f"{lam:g}": {"weights": list(m.weights), "training": m.meta.get("training", {})}
        for lam, m in models.items()
    }
    result["slowdown"] = slowdown(models)
    result["verdict"] = {f"{lam:g}": verdict(result["slowdown"], lam) for lam in lambdas}
    result["front"] = front(models, args.energy_sequences)
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = [int(x) for x in args.seed_check.split(",") if x.strip()]
    result["seed_check"] = seed_check(seeds, args.out, not args.no_train)
    result["seconds"] = time.perf_counter() - start
    (args.out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(args.out, result)
    print(json.dumps(result["verdict"], indent=2))
    print(f"wrote {args.out}/results.json, bsld.png, front.png in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
