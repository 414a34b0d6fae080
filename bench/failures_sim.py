"""Failures on a real trace: GPU-hours lost with and without automatic resume, detection latency.

The Philly job list (``philly.csv``, a time window of it) is replayed through the simulator
(fusesched core, FCFS + EASY backfilling, first-fit with per-device GPU accounting) on a
cluster of 8-GPU nodes sized from the window's offered load, **without failures**. Each job's
failure-free run (start, end, its nodes and the exact GPU indices the core gave it) becomes a
:class:`~fusesched.sim.failures.JobRun` with a checkpoint interval; node and GPU failures are
drawn from MTBFs (:func:`~fusesched.sim.failures.draw_failures`) and
:func:`~fusesched.sim.failures.compare` prices them under the three recovery modes
(``auto-resume``, ``auto-restart``, ``none``), for several seeds. Two sensitivity sweeps follow:
lost GPU-hours against the checkpoint interval and against a scale on every MTBF.

**The failure model** (:func:`failure_model`, parameters and sources in
``docs/FAILURES_RESULTS.md``): per-GPU and per-node MTBFs and a hang rate derived from the
interruptions Meta reports for the Llama 3 405B pre-training (54 days on 16,384 H100 GPUs in
2,048 hosts, Table 5 of "The Llama 3 Herd of Models", 2024); detection latencies and overheads
are fusesched's own defaults (heartbeat timeout, sample interval, the ``ai-train`` hang window);
the restart budget is the controller's default ``RestartPolicy`` (3).

**Post-processing, not injection**: the runs come from a failure-free simulation, so a re-run
after a failure starts at once on other devices (no queueing, no capacity lost to repairs, no
knock-on delay to other jobs). See the notes in ``docs/FAILURES_RESULTS.md``.

Run: ``.venv/bin/python bench/failures_sim.py --window 28:42 --seeds 20 --json
docs/figures/failures/results.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from cli_args import day_window
from fusesched.model.events import StartJob
from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.node import NodeSpec
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig
from fusesched.sim import failures as fl
from fusesched.sim.engine import SimJob, Simulation
from fusesched.sim.failures import (
    HOUR,
    FailureEvent,
    FailureModel,
    FailureType,
    JobRun,
    LatencyStats,
    RecoveryMode,
    RecoveryReport,
    Reliability,
    SimNode,
    compare,
    draw_failures,
    expected_failures,
)
from fusesched.traces.philly import load_philly_jobs, task_shape

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE_DIR = ROOT.parent / "shared" / "traces" / "philly"
DAY = 86400.0
DEVICE_TYPE = "philly-8gpu"
MODES = tuple(RecoveryMode)
CAUSES = tuple(FailureType)

# --- the failure model and where its numbers come from ------------------------------------

# Llama 3 405B pre-training (Dubey et al., "The Llama 3 Herd of Models", arXiv:2407.21783,
# section 3.3.4 and Table 5): 419 unexpected interruptions in a 54-day snapshot on 16,384 H100
# GPUs in 2,048 hosts of 8.
LLAMA3_GPUS = 16_384
LLAMA3_HOSTS = 2_048
LLAMA3_HOURS = 54 * 24.0
# GPU category of Table 5: faulty GPU 148, HBM3 72, SRAM 19, GPU system processor 17, silent
# data corruption 6, thermal interface + sensor 6.
LLAMA3_GPU_FAILURES = 148 + 72 + 19 + 17 + 6 + 6  # 268
# host and network: network switch/cable 35, unplanned host maintenance 32, NIC 7, SSD 3,
# power supply 3, chassis 2, IO expansion board 2, CPU 2, system memory 2.
LLAMA3_NODE_FAILURES = 35 + 32 + 7 + 3 + 3 + 2 + 2 + 2 + 2  # 88
LLAMA3_HANGS = 7  # NCCL watchdog timeouts (software bugs, 54, are crashes: not retried)
GPU_MTBF_H = LLAMA3_GPUS * LLAMA3_HOURS / LLAMA3_GPU_FAILURES  # ≈ 79,200 h per GPU
NODE_MTBF_H = LLAMA3_HOSTS * LLAMA3_HOURS / LLAMA3_NODE_FAILURES  # ≈ 30,200 h per node
HANG_RATE = LLAMA3_HANGS / (LLAMA3_GPUS * LLAMA3_HOURS)  # ≈ 3.3e-7 per GPU-hour
RESTART_BUDGET = 3  # the controller's default RestartPolicy(max_restarts=3)


def failure_model(
    mtbf_scale: float = 1.0,
    *,
    node_mtbf_h: float = NODE_MTBF_H,
    gpu_mtbf_h: float = GPU_MTBF_H,
    hang_rate_per_hour: float = HANG_RATE,
    restart_overhead_s: float = 300.0,
    max_restarts: int = RESTART_BUDGET,
) -> FailureModel:
    """The model of ``docs/FAILURES_RESULTS.md``; ``mtbf_scale`` multiplies both MTBFs and
    divides the hang rate (×0.5: every failure twice as frequent)."""
    if mtbf_scale <= 0:
        raise ValueError("mtbf_scale must be positive")
    return FailureModel(
        {DEVICE_TYPE: Reliability(node_mtbf_h * mtbf_scale, gpu_mtbf_h * mtbf_scale)},
        hang_rate_per_hour=hang_rate_per_hour / mtbf_scale,
        restart_overhead_s=restart_overhead_s,
        max_restarts=max_restarts,
    )


# --- the workload and its failure-free schedule -------------------------------------------


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: str
    submit: float  # seconds from the window's start
    runtime: float
    gpus: int


def philly_jobs(
    trace_dir: Path, window: tuple[float, float] | None, limit: int | None
) -> list[TraceJob]:
    """Jobs submitted in ``window`` (days from the trace's first submission), times shifted so
    the window starts at 0, at most ``limit`` of them (the first ones). Every VC is kept: the
    cluster here is one pool."""
    lo, hi = (window[0] * DAY, window[1] * DAY) if window else (0.0, math.inf)
    picked = [j for j in load_philly_jobs(trace_dir / "philly.csv") if lo <= j.submit_s < hi]
    return [
        TraceJob(f"p{j.line}", j.submit_s - lo, max(j.duration_s, 1.0), j.gpus)
        for j in picked[:limit]
    ]


def cluster_nodes(
    jobs: Sequence[TraceJob], span_s: float, gpus_per_node: int, target_util: float
) -> int:
    """8-GPU nodes for the window's offered load (GPU-seconds submitted / span) at
    ``target_util``, and at least enough for the largest job."""
    offered = sum(j.runtime * j.gpus for j in jobs) / max(span_s, 1.0)
    need = math.ceil(offered / target_util / gpus_per_node)
    largest = max((math.ceil(j.gpus / gpus_per_node) for j in jobs), default=1)
    return max(need, largest, 1)


def node_specs(count: int, gpus_per_node: int) -> list[NodeSpec]:
    res = Resources.parse({"cpu": 64, "memory": "512Gi", "nvidia.com/gpu": gpus_per_node})
    return [NodeSpec(f"n{i:04d}", res, {}) for i in range(count)]


def sim_nodes(specs: Sequence[NodeSpec], gpus_per_node: int) -> list[SimNode]:
    return [SimNode(s.name, DEVICE_TYPE, gpus_per_node) for s in specs]


@dataclass(frozen=True, slots=True)
class Schedule:
    placements: list[JobRun]  # failure-free runs: when, on which nodes and GPUs
    nodes: int
    gpus_per_node: int
    span_s: float  # the last job's end
    wait_mean_s: float
    wait_p95_s: float
    util_window: float  # GPUs allocated / capacity over the submission window
    wall_s: float


def simulate(
    jobs: Sequence[TraceJob], nodes: int, gpus_per_node: int = 8, *, window_s: float = 0.0
) -> Schedule:
    """Replay ``jobs`` failure-free (FCFS + EASY, first-fit; walltime = the true runtime, so
    EASY's estimates are exact) and read each job's nodes and GPU indices from its StartJob."""
    specs = node_specs(nodes, gpus_per_node)
    sim_jobs = []
    for j in jobs:
        tasks, per = task_shape(j.gpus, gpus_per_node)
        group = TaskGroup("main", tasks, Resources.parse({"cpu": 1, "nvidia.com/gpu": per}))
        spec = JobSpec(j.id, (group,), walltime_s=j.runtime, submit_time=j.submit)
        sim_jobs.append(SimJob(spec, j.runtime))
    sim = Simulation(specs, sim_jobs, CoreConfig(), keep_log=True)
    t0 = time.perf_counter()
    result = sim.run()
    wall = time.perf_counter() - t0
    where: dict[str, tuple[tuple[str, ...], tuple[tuple[str, int], ...]]] = {}
    for decision in result.log:
        if not isinstance(decision, StartJob):
            continue
        gpus: list[tuple[str, int]] = []
        for placed in decision.groups:
            if placed.devices is None:
                raise RuntimeError(f"{decision.job_id}: no device assignment")
            for task in placed.devices.tasks:
                node = str(placed.name_table[task.row])
                gpus.extend((node, int(i)) for i in task.indices)
        where[decision.job_id] = (decision.nodes, tuple(gpus))
    placements = []
    waits = []
    for o in result.outcomes:
        if o.rejected:
            raise RuntimeError(f"{o.job_id} rejected: {o.rejected}")
        used, gpus_used = where[o.job_id]
        placements.append(JobRun(o.job_id, o.start, o.end, used, gpus_used))
        waits.append(o.start - o.submit)
    span = max((p.end for p in placements), default=0.0)
    util = 0.0
    if window_s > 0:
        busy = sum(
            max(0.0, min(p.end, window_s) - p.start) * len(p.gpus)
            for p in placements
            if p.start < window_s
        )
        util = busy / (window_s * nodes * gpus_per_node)
    w = np.asarray(waits or [0.0])
    return Schedule(
        placements,
        nodes,
        gpus_per_node,
        span,
        float(w.mean()),
        float(np.percentile(w, 95)),
        util,
        wall,
    )


def job_runs(placements: Sequence[JobRun], checkpoint_s: float | None) -> list[JobRun]:
    """Failure-free runs with one checkpoint interval for every job; no walltime (Philly jobs
    state none, so an unnoticed hang holds its GPUs ``hang_unnoticed_s``)."""
    return [replace(p, checkpoint_interval_s=checkpoint_s, walltime_s=None) for p in placements]


# --- pricing the failures -----------------------------------------------------------------


def assess_with_samples(
    runs: Sequence[JobRun],
    failures: Sequence[FailureEvent],
    nodes: Sequence[SimNode],
    model: FailureModel,
    mode: RecoveryMode,
    *,
    seed: int = 0,
) -> tuple[RecoveryReport, dict[FailureType, list[float]]]:
    """:func:`fusesched.sim.failures.assess` and the raw detection latencies behind its
    ``detection`` statistics (for a CDF). The report carries only summary statistics, so this
    repeats ``assess``'s loop over its private per-job step (``_assess_job``, ``_Tally``);
    ``tests/sim/test_failures_bench.py`` checks the report equals ``assess``'s."""
    by_name = {n.name: n for n in nodes}
    index: dict[tuple[str, int | None], list[FailureEvent]] = {}
    for e in failures:
        if e.type is not FailureType.HANG:
            index.setdefault((e.node, e.gpu), []).append(e)
    for events in index.values():
        events.sort(key=lambda e: e.time)
    tally = fl._Tally(
        {k: 0 for k in CAUSES}, {k: 0.0 for k in CAUSES}, 0.0, {k: [] for k in CAUSES}
    )
    for seq, run in enumerate(runs):
        fl._assess_job(run, seq, index, by_name, model, mode, seed, tally)
    report = RecoveryReport(
        mode=mode,
        jobs=len(runs),
        completed=tally.completed,
        abandoned=tally.abandoned,
        failures=dict(tally.failures),
        restarts=tally.restarts,
        gpu_hours_allocated=tally.allocated / HOUR,
        gpu_hours_useful=tally.useful / HOUR,
        gpu_hours_lost=sum(tally.lost.values()) / HOUR,
        lost_by_cause={k: v / HOUR for k, v in tally.lost.items()},
        node_hours_lost=tally.lost_nodes / HOUR,
        delay_hours=tally.delay / HOUR,
        detection={k: LatencyStats.of(v) for k, v in tally.latencies.items()},
    )
    return report, {k: list(v) for k, v in tally.latencies.items()}


@dataclass(slots=True)
class Trial:
    """One configuration (model, checkpoint interval) over several seeds."""

    reports: dict[RecoveryMode, list[RecoveryReport]]
    latencies: dict[RecoveryMode, dict[FailureType, list[float]]]
    failures_drawn: list[int]


def run_trial(
    placements: Sequence[JobRun],
    nodes: Sequence[SimNode],
    model: FailureModel,
    seeds: Sequence[int],
    *,
    checkpoint_s: float | None = 1800.0,
    modes: Sequence[RecoveryMode] = MODES,
    span_s: float | None = None,
) -> Trial:
    """Per seed: draw node and GPU failures over the schedule's span (``default_rng(seed)``)
    and price them under each mode (``assess`` seeded with the same seed, so modes share luck).
    All three modes: through :func:`compare`; a subset: through :func:`assess_with_samples`."""
    runs = job_runs(placements, checkpoint_s)
    span = span_s if span_s is not None else max((r.end for r in runs), default=0.0) + 1.0
    reports: dict[RecoveryMode, list[RecoveryReport]] = {m: [] for m in modes}
    latencies: dict[RecoveryMode, dict[FailureType, list[float]]] = {
        m: {c: [] for c in CAUSES} for m in modes
    }
    drawn = []
    for seed in seeds:
        events = draw_failures(nodes, span, model, np.random.default_rng(seed))
        drawn.append(len(events))
        for mode in modes:
            report, samples = assess_with_samples(runs, events, nodes, model, mode, seed=seed)
            reports[mode].append(report)
            for cause, values in samples.items():
                latencies[mode][cause].extend(values)
    return Trial(reports, latencies, drawn)


def check_against_compare(
    placements: Sequence[JobRun],
    nodes: Sequence[SimNode],
    model: FailureModel,
    trial: Trial,
    seed: int,
    index: int,
    checkpoint_s: float | None,
) -> None:
    """The reports of seed ``seed`` (``index`` in the trial) equal :func:`compare`'s."""
    runs = job_runs(placements, checkpoint_s)
    span = max((r.end for r in runs), default=0.0) + 1.0
    events = draw_failures(nodes, span, model, np.random.default_rng(seed))
    for mode, report in compare(runs, events, nodes, model, seed=seed).items():
        if report != trial.reports[mode][index]:
            raise AssertionError(f"{mode}: assess_with_samples differs from compare")


# --- summaries ----------------------------------------------------------------------------


def _ms(values: Sequence[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    std = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return {"mean": float(a.mean()), "std": std, "sem": std / math.sqrt(a.size), "n": a.size}


def _yerr(points: Sequence[Mapping[str, float]]) -> np.ndarray:
    """Error bars of ±1 standard error of the mean over seeds, the lower one clipped at 0."""
    means = np.array([p["mean"] for p in points])
    sem = np.array([p["sem"] for p in points])
    return np.vstack([np.minimum(sem, means), sem])


def summarize(trial: Trial) -> dict[str, Any]:
    """Per mode: mean and standard deviation over seeds of every figure of the report; the
    detection latencies pooled over seeds."""
    out: dict[str, Any] = {}
    for mode, reports in trial.reports.items():
        failed_jobs = [r.failures for r in reports]
        out[str(mode)] = {
            "gpu_hours_allocated": _ms([r.gpu_hours_allocated for r in reports]),
            "gpu_hours_useful": _ms([r.gpu_hours_useful for r in reports]),
            "gpu_hours_lost": _ms([r.gpu_hours_lost for r in reports]),
            "lost_by_cause": {str(c): _ms([r.lost_by_cause[c] for r in reports]) for c in CAUSES},
            "node_hours_lost": _ms([r.node_hours_lost for r in reports]),
            "goodput": _ms([r.goodput for r in reports]),
            "failures": {str(c): _ms([float(f[c]) for f in failed_jobs]) for c in CAUSES},
            "failures_total": _ms([float(sum(f.values())) for f in failed_jobs]),
            "restarts": _ms([float(r.restarts) for r in reports]),
            "abandoned": _ms([float(r.abandoned) for r in reports]),
            "delay_hours": _ms([r.delay_hours for r in reports]),
            "detection": {
                str(c): _stats(LatencyStats.of(trial.latencies[mode][c])) for c in CAUSES
            },
        }
    return out


def _stats(s: LatencyStats) -> dict[str, float]:
    return {
        "count": s.count,
        "mean_s": s.mean_s,
        "p50_s": s.p50_s,
        "p95_s": s.p95_s,
        "max_s": s.max_s,
    }


def sweep(
    placements: Sequence[JobRun],
    nodes: Sequence[SimNode],
    seeds: Sequence[int],
    *,
    intervals_min: Sequence[float],
    scales: Sequence[float],
    base: Trial | None = None,
    base_interval_min: float = 30.0,
    hang_rate_per_hour: float = HANG_RATE,
) -> dict[str, Any]:
    """Lost GPU-hours (mean, std over ``seeds``) against the checkpoint interval (MTBF ×1)
    and against the MTBF scale (checkpoints every ``base_interval_min``). Only
    ``auto-resume`` reads the checkpoint interval, so the other modes are priced once per
    scale; ``base`` (the main trial, on the same seeds) is reused where it matches."""
    model = failure_model(1.0, hang_rate_per_hour=hang_rate_per_hour)
    by_interval: dict[str, Any] = {}
    for minutes in intervals_min:
        if minutes == base_interval_min and base is not None:
            trial = base
        else:
            trial = run_trial(
                placements, nodes, model, seeds, checkpoint_s=minutes * 60.0, modes=(MODES[0],)
            )
        by_interval[f"{minutes:g}"] = _ms([r.gpu_hours_lost for r in trial.reports[MODES[0]]])
    by_scale: dict[str, Any] = {}
    for scale in scales:
        if scale == 1.0 and base is not None:
            trial = base
        else:
            trial = run_trial(
                placements,
                nodes,
                failure_model(scale, hang_rate_per_hour=hang_rate_per_hour),
                seeds,
                checkpoint_s=base_interval_min * 60,
            )
        by_scale[f"{scale:g}"] = {
            str(m): _ms([r.gpu_hours_lost for r in reports]) for m, reports in trial.reports.items()
        }
    flat = {str(m): by_scale.get("1", {}).get(str(m)) for m in MODES[1:]}
    return {
        "checkpoint_interval_min": by_interval,
        "mtbf_scale": by_scale,
        "no_checkpoint": flat,
        "base_interval_min": base_interval_min,
    }


# --- figures and tables -------------------------------------------------------------------

COLOURS = {"node": "#4c72b0", "gpu": "#dd8452", "hang": "#55a868"}
MODE_COLOURS = {"auto-resume": "#2a9d8f", "auto-restart": "#e9a23b", "none": "#e76f51"}
MARKERS = {"auto-resume": "o", "auto-restart": "s", "none": "x"}
STYLES = {"auto-resume": "-", "auto-restart": "-", "none": "--"}


def plot(
    summary: Mapping[str, Any], trial: Trial, sweeps: Mapping[str, Any], out: Path
) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    modes = [str(m) for m in MODES]

    fig, ax = plt.subplots(figsize=(7.5, 4))
    width = 0.26
    x = np.arange(len(modes))
    for k, cause in enumerate(str(c) for c in CAUSES):
        points = [summary[m]["lost_by_cause"][cause] for m in modes]
        means = [p["mean"] for p in points]
        bars = ax.bar(
            x + (k - 1) * width,
            means,
            width,
            yerr=_yerr(points),
            capsize=3,
            label=cause,
            color=COLOURS[cause],
        )
        for bar, v in zip(bars, means, strict=True):
            if v > 0:
                ax.annotate(
                    f"{v:,.0f}" if v >= 10 else f"{v:.2g}",
                    (bar.get_x() + bar.get_width() / 2, v),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                    xytext=(0, 2),
                    textcoords="offset points",
                )
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0.0)
    ax.set_xticks(x, modes)
    ax.set_ylabel("GPU-hours lost (mean ± s.e. over seeds)")
    ax.set_title("GPU-hours lost to failures, by cause and recovery mode")
    ax.legend(title="cause")
    fig.tight_layout()
    paths.append(out / "lost_by_cause.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    good = np.array([summary[m]["goodput"]["mean"] for m in modes])
    spread = np.array([summary[m]["goodput"]["std"] for m in modes])  # s.d. over seeds
    ax.bar(modes, 100 * good, yerr=100 * spread, capsize=5, color=[MODE_COLOURS[m] for m in modes])
    for i, v in enumerate(good.tolist()):
        ax.annotate(
            f"{100 * v:.3f} %",
            (i, 100 * v),
            ha="center",
            va="bottom",
            fontsize=8,
            xytext=(0, 6),
            textcoords="offset points",
        )
    low = float(np.min(100 * (good - spread)))
    ax.set_ylim(max(0.0, low - 0.5 * (100 - low)), 100.0)
    ax.set_ylabel("goodput (useful / allocated GPU-hours, %)")
    ax.set_title(f"Goodput per mode (error bars: ±1 s.d. over {len(trial.failures_drawn)} seeds)")
    fig.tight_layout()
    paths.append(out / "goodput.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, mode in zip(axes, (RecoveryMode.AUTO_RESUME, RecoveryMode.NONE), strict=True):
        for cause in CAUSES:
            values = np.sort(np.asarray(trial.latencies[mode][cause]))
            if values.size == 0:
                continue
            y = np.arange(1, values.size + 1) / values.size
            ax.step(
                values,
                y,
                where="post",
                color=COLOURS[str(cause)],
                label=f"{cause} (n={values.size})",
            )
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(0.0, 2 * DAY)
        ax.set_xlabel("seconds from the failure to the job being let go")
        title = (
            "automatic (auto-resume = auto-restart)"
            if mode is not RecoveryMode.NONE
            else ("none: heartbeat notices crashes; hangs held 24 h")
        )
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("CDF (pooled over seeds)")
    fig.suptitle("Detection latency per cause")
    fig.tight_layout()
    paths.append(out / "detection_cdf.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    ax = axes[0]
    by_int = sweeps["checkpoint_interval_min"]
    xs = [float(k) for k in by_int]
    ax.errorbar(
        xs,
        [by_int[k]["mean"] for k in by_int],
        yerr=_yerr(list(by_int.values())),
        marker="o",
        capsize=3,
        color=MODE_COLOURS["auto-resume"],
        label="auto-resume",
    )
    for other, value in sweeps["no_checkpoint"].items():
        if value is not None:
            ax.axhline(
                value["mean"],
                ls=STYLES[other] if other == "none" else ":",
                color=MODE_COLOURS[other],
                label=f"{other} (no checkpoint used)",
            )
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0.0)
    ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_xticks([], minor=True)
    ax.set_xlabel("checkpoint interval (minutes)")
    ax.set_ylabel("GPU-hours lost (mean ± s.e. over seeds)")
    ax.set_title("vs checkpoint interval (MTBF ×1)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    ax = axes[1]
    by_scale = sweeps["mtbf_scale"]
    scales = [float(k) for k in by_scale]
    for name in (str(m) for m in MODES):
        ax.errorbar(
            scales,
            [by_scale[k][name]["mean"] for k in by_scale],
            yerr=_yerr([by_scale[k][name] for k in by_scale]),
            marker=MARKERS[name],
            ls=STYLES[name],
            capsize=3,
            color=MODE_COLOURS[name],
            label=name,
        )
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylim(bottom=0.0)
    ax.set_xticks(scales, [f"×{s:g}" for s in scales])
    ax.set_xticks([], minor=True)
    ax.set_xlabel("MTBF scale (×0.5: failures twice as frequent)")
    ax.set_title(
        f"vs MTBF scale (checkpoints every {sweeps['base_interval_min']:g} min)", fontsize=10
    )
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.suptitle("Sensitivity of GPU-hours lost")
    fig.tight_layout()
    paths.append(out / "sensitivity.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def _pm(v: Mapping[str, float], fmt: str = "{:,.1f}") -> str:
    return f"{fmt.format(v['mean'])} ± {fmt.format(v['std'])}"


def tables(summary: Mapping[str, Any], sweeps: Mapping[str, Any]) -> str:
    modes = [str(m) for m in MODES]
    lines = ["| per mode (mean ± s.d. over seeds) | " + " | ".join(modes) + " |"]
    lines.append("|---|" + "---|" * len(modes))
    rows: list[tuple[str, Any]] = [
        ("GPU-hours allocated", lambda s: _pm(s["gpu_hours_allocated"])),
        ("GPU-hours useful", lambda s: _pm(s["gpu_hours_useful"])),
        ("**GPU-hours lost**", lambda s: "**" + _pm(s["gpu_hours_lost"]) + "**"),
        *[(f"… lost to {c}", lambda s, c=str(c): _pm(s["lost_by_cause"][c])) for c in CAUSES],
        ("node-hours lost", lambda s: _pm(s["node_hours_lost"])),
        (
            "goodput",
            lambda s: f"{100 * s['goodput']['mean']:.4f} % ± {100 * s['goodput']['std']:.4f}",
        ),
        *[(f"failures: {c}", lambda s, c=str(c): _pm(s["failures"][c], "{:.2f}")) for c in CAUSES],
        ("restarts (automatic or by hand)", lambda s: _pm(s["restarts"], "{:.2f}")),
        ("jobs abandoned (budget spent)", lambda s: _pm(s["abandoned"], "{:.2f}")),
        ("completion delay, job-hours", lambda s: _pm(s["delay_hours"])),
    ]
    for name, fn in rows:
        lines.append(f"| {name} | " + " | ".join(fn(summary[m]) for m in modes) + " |")
    lines.append("")
    lines.append("| detection latency (pooled) | mode | count | mean | p50 | p95 | max |")
    lines.append("|---|---|---|---|---|---|---|")
    for m in modes:
        for c in (str(c) for c in CAUSES):
            d = summary[m]["detection"][c]
            if not d["count"]:
                lines.append(f"| {c} | {m} | 0 | – | – | – | – |")
                continue
            lines.append(
                f"| {c} | {m} | {d['count']} | {_dur(d['mean_s'])} | {_dur(d['p50_s'])} | "
                f"{_dur(d['p95_s'])} | {_dur(d['max_s'])} |"
            )
    lines.append("")
    lines.append("| checkpoint interval (min) | auto-resume GPU-hours lost |")
    lines.append("|---|---|")
    for k, v in sweeps["checkpoint_interval_min"].items():
        lines.append(f"| {k} | {_pm(v)} |")
    lines.append("")
    lines.append("| MTBF scale | " + " | ".join(modes) + " |")
    lines.append("|---|" + "---|" * len(modes))
    for k, v in sweeps["mtbf_scale"].items():
        lines.append(f"| ×{k} | " + " | ".join(_pm(v[m]) for m in modes) + " |")
    return "\n".join(lines)


def _dur(s: float) -> str:
    return f"{s:.1f} s" if s < 600 else f"{s / 3600:.2f} h"


# --- command line -------------------------------------------------------------------------


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE_DIR)
    p.add_argument(
        "--window",
        type=day_window,
        default=(28.0, 42.0),
        help="FROM:TO, days from the trace's first submission (default 28:42)",
    )
    p.add_argument("--limit", type=int, default=None, help="at most this many jobs")
    p.add_argument("--seeds", type=int, default=20, help="seeds of the main comparison")
    p.add_argument("--sweep-seeds", type=int, default=10, help="seeds of each sweep point")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument(
        "--target-util",
        type=float,
        default=0.7,
        help="size the cluster so the offered load is this share of it",
    )
    p.add_argument("--nodes", type=int, default=None, help="cluster size (default: sized)")
    p.add_argument("--checkpoint-min", type=float, default=30.0)
    p.add_argument("--intervals", type=_floats, default=[10.0, 30.0, 60.0, 120.0])
    p.add_argument("--scales", type=_floats, default=[0.5, 1.0, 2.0])
    p.add_argument(
        "--hang-rate",
        type=float,
        default=HANG_RATE,
        help="hangs per GPU-hour of running time (default: Llama 3's NCCL watchdog timeouts)",
    )
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "failures")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)

    sys.path.insert(0, str(ROOT / "bench"))
    from machine_info import machine

    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cores']} cores, Python {info['python']}, "
        f"git {info['git']}, src {info['src_sha256']}, load {info['loadavg_at_start']:.2f}"
    )
    t0 = time.perf_counter()
    jobs = philly_jobs(args.trace_dir, args.window, args.limit)
    if not jobs:
        print("no jobs in the window", file=sys.stderr)
        return 1
    span = (args.window[1] - args.window[0]) * DAY if args.window else jobs[-1].submit
    nodes = args.nodes or cluster_nodes(jobs, span, args.gpus_per_node, args.target_util)
    load_s = time.perf_counter() - t0
    gpu_hours = sum(j.runtime * j.gpus for j in jobs) / HOUR
    print(
        f"{len(jobs)} jobs, {gpu_hours:,.0f} GPU-hours, {nodes} nodes × {args.gpus_per_node} "
        f"GPUs, loaded in {load_s:.1f} s"
    )
    schedule = simulate(jobs, nodes, args.gpus_per_node, window_s=span)
    print(
        f"simulated in {schedule.wall_s:.1f} s: last end {schedule.span_s / DAY:.1f} d, "
        f"wait mean {schedule.wait_mean_s / 60:.1f} min, p95 {schedule.wait_p95_s / 60:.1f} min,"
        f" utilisation over the window {schedule.util_window:.1%}"
    )
    cluster = sim_nodes(node_specs(nodes, args.gpus_per_node), args.gpus_per_node)
    model = failure_model(1.0, hang_rate_per_hour=args.hang_rate)
    expect_node, expect_gpu = expected_failures(cluster, schedule.span_s, model)
    print(
        f"model: node MTBF {NODE_MTBF_H:,.0f} h, GPU MTBF {GPU_MTBF_H:,.0f} h, hangs "
        f"{args.hang_rate:.2e}/GPU-h; expected over the span on the whole cluster: "
        f"{expect_node:.1f} node, {expect_gpu:.1f} GPU failures"
    )
    seeds = list(range(args.seeds))
    t1 = time.perf_counter()
    checkpoint_s = args.checkpoint_min * 60.0
    trial = run_trial(schedule.placements, cluster, model, seeds, checkpoint_s=checkpoint_s)
    check_against_compare(schedule.placements, cluster, model, trial, seeds[0], 0, checkpoint_s)
    main_s = time.perf_counter() - t1
    summary = summarize(trial)
    print(f"main comparison: {len(seeds)} seeds × 3 modes in {main_s:.1f} s")
    t2 = time.perf_counter()
    sweep_seeds = seeds[: args.sweep_seeds]
    base = trial if sweep_seeds == seeds else None
    sweeps = sweep(
        schedule.placements,
        cluster,
        sweep_seeds,
        intervals_min=args.intervals,
        scales=args.scales,
        base=base,
        base_interval_min=args.checkpoint_min,
        hang_rate_per_hour=args.hang_rate,
    )
    sweep_s = time.perf_counter() - t2
    print(f"sweeps: {len(sweep_seeds)} seeds in {sweep_s:.1f} s\n")
    print(tables(summary, sweeps))
    paths = [] if args.no_plots else plot(summary, trial, sweeps, args.out)
    for path in paths:
        print(f"wrote {path}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "machine": info,
            "args": {k: str(v) for k, v in vars(args).items()},
            "jobs": len(jobs),
            "gpu_hours_submitted": gpu_hours,
            "cluster": {"nodes": nodes, "gpus_per_node": args.gpus_per_node},
            "schedule": {
                "span_days": schedule.span_s / DAY,
                "wait_mean_s": schedule.wait_mean_s,
                "wait_p95_s": schedule.wait_p95_s,
                "util_window": schedule.util_window,
                "simulate_s": schedule.wall_s,
            },
            "model": {
                "node_mtbf_h": NODE_MTBF_H,
                "gpu_mtbf_h": GPU_MTBF_H,
                "hang_rate_per_gpu_hour": args.hang_rate,
                "restart_overhead_s": model.restart_overhead_s,
                "max_restarts": model.max_restarts,
                "checkpoint_interval_s": checkpoint_s,
                "expected_node_failures_cluster": expect_node,
                "expected_gpu_failures_cluster": expect_gpu,
            },
            "failures_drawn_per_seed": trial.failures_drawn,
            "summary": summary,
            "sweeps": sweeps,
            "timings_s": {
                "load": load_s,
                "simulate": schedule.wall_s,
                "main": main_s,
                "sweeps": sweep_s,
                "total": time.perf_counter() - t0,
            },
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {args.json}")
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
