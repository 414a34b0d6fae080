"""Energy on real traces: always-on vs idle-timeout vs forecast-driven power saving.

For an SWF trace (Parallel Workloads Archive, default HPC2N) and the Philly GPU trace, a time
window of jobs is replayed through the simulator (fusesched core, FCFS + EASY backfilling,
first-fit or ``--placement``) six times in one run, once per power-saving policy
(``always-on``, ``idle-timeout``, ``forecast``, ``predictive``, ``surge``, ``surge-room``; see
docs/ENERGY.md), on the same nodes with the same power model. Philly runs twice: on one pool
sized for an
offered load (``--target-util``) and as Helios' simulator partitions it into 11 virtual
clusters (``Philly-VC``, 352 nodes, ``philly_vc.csv``). Jobs submitted during ``--warmup``
days before the window are replayed too (the cluster is not empty when the window opens and
the forecaster has history), but only the window is measured: energy metered from its first to
its last second, waits of the jobs submitted in it.

Per trace and policy it reports kWh (and kWh per 30-day month), the share saved against
always-on, mean and p95 wait and the share of extra mean wait, suspends and resumes; a table
(``table.md``), ``results.json`` and plots go to ``--out``.

The ceiling printed per trace is what suspending every idle node-hour of always-on at no cost
would save; the zero-wait bound what a clairvoyant policy could save that never makes a job
wait longer than always-on (``zero_wait_bound``); the packing bound what the ceiling could
reach if the running jobs filled as few nodes as capacity allows (``packing_bound``: no
placement can do more). ``--with-placement`` re-runs every policy with another placement
(rows ``POLICY + NAME``, judged against idle-timeout under both placements). ``--sweep`` adds
idle-timeout at other thresholds, forecast at other margins and surge with a shorter memory
(the energy/wait frontiers); ``--extra-util`` re-runs Philly on clusters of other sizes;
``--skip`` leaves cases out.

Run (docs/ENERGY_RESULTS.md, 4-11 min on 2 shared cores): ``nice -n 19 .venv/bin/python
bench/energy_sim.py --extra-util 0.5 --sweep --out docs/figures/energy``. The development
windows the forecast-driven policies were tuned on: ``--swf-window 480:487 --gpu-window
21:28 --target-util 0.6``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from cli_args import day_window
from fusesched.model.job import JobSpec, Placement, TaskGroup
from fusesched.model.node import LABEL_POOL, NodeSpec
from fusesched.model.resources import CPU, GPU, Resources
from fusesched.policies.placement import PLACEMENT_POLICIES
from fusesched.policies.registry import CoreConfig
from fusesched.power.model import DEFAULT_MODELS, PowerModel
from fusesched.power.saving import SavingConfig
from fusesched.sim.engine import SimJob, Simulation
from fusesched.sim.power import (
    DEFAULT_POOL,
    PowerReport,
    PowerSetup,
    PowerSim,
    default_node_type,
)
from fusesched.sim.workload import swf_workload
from fusesched.traces.philly import load_philly_jobs, load_philly_vcs, task_shape
from fusesched.traces.swf import load_swf

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
DEFAULT_SWF = TRACES / "pwa-swf" / "HPC2N-2002-2.2-cln.swf.gz"
DEFAULT_PHILLY = TRACES / "philly"
POLICIES = ("always-on", "idle-timeout", "forecast", "predictive", "surge")
#: run here after those (and not by bench/energy_survey.py, which runs ``POLICIES``)
LATER_POLICIES = ("surge-room",)
RUN = (*POLICIES, *LATER_POLICIES)
#: the policies the issue's goal is checked for (idle-timeout is the baseline)
CANDIDATES = ("forecast", "predictive", "surge", "surge-room")
RISE_WAKE, RISE_KEEP = PowerSetup().rise_margin, PowerSetup().rise_keep_margin
DAY = 86400.0
GOAL_SAVING = 0.20
GOAL_WAIT = 0.05


@dataclass(frozen=True, slots=True)
class Case:
    """One trace window: the cluster and the jobs (times from the start of the warm-up)."""

    name: str
    kind: str  # "swf" or "gpu"
    nodes: tuple[NodeSpec, ...]
    jobs: tuple[SimJob, ...]
    meter: tuple[float, float]  # the measured window
    description: str


def measured_jobs(case: Case) -> int:
    """Jobs submitted inside the case's measured window (the warm-up's are not counted)."""
    lo, hi = case.meter
    return sum(1 for j in case.jobs if lo <= j.spec.submit_time < hi)


def _shift(job: SimJob, offset: float) -> SimJob:
    moved = replace(job.spec, submit_time=job.spec.submit_time - offset)
    return SimJob(moved, job.runtime, job.exit_code)


def swf_case(path: Path, window: tuple[float, float], warmup_days: float) -> Case:
    """The SWF trace's jobs submitted in ``window`` (days) and the warm-up before it, on the
    machine its header describes (MaxNodes nodes sharing MaxProcs CPUs)."""
    workload = swf_workload(load_swf(path))
    lo = max(0.0, (window[0] - warmup_days) * DAY)
    hi = window[1] * DAY
    jobs = tuple(_shift(j, lo) for j in workload.jobs if lo <= j.spec.submit_time < hi)
    meter = (window[0] * DAY - lo, hi - lo)
    cpus = workload.total_cpus
    desc = (
        f"{path.name}, days {window[0]:g}-{window[1]:g} (+{(window[0] * DAY - lo) / DAY:g} d "
        f"warm-up), {len(workload.nodes)} nodes / {cpus} CPUs"
    )
    return Case(path.name.split("-cln")[0], "swf", workload.nodes, jobs, meter, desc)


def gpu_nodes(count: int, gpus_per_node: int) -> tuple[NodeSpec, ...]:
    res = Resources.parse({"cpu": 64, "memory": "512Gi", "nvidia.com/gpu": gpus_per_node})
    return tuple(NodeSpec(f"g{i:04d}", res, {LABEL_POOL: "gpu"}) for i in range(count))


def philly_case(
    trace_dir: Path,
    window: tuple[float, float],
    warmup_days: float,
    target_util: float,
    gpus_per_node: int,
) -> Case:
    """Philly jobs submitted in ``window`` (days from the trace's first submission) and the
    warm-up before it, on 8-GPU nodes sized so the window's offered load (GPU-seconds
    submitted / window length) is ``target_util`` of the cluster."""
    lo = max(0.0, (window[0] - warmup_days) * DAY)
    hi = window[1] * DAY
    raw = [j for j in load_philly_jobs(trace_dir / "philly.csv") if lo <= j.submit_s < hi]
    in_window = [j for j in raw if j.submit_s >= window[0] * DAY]
    offered = sum(max(j.duration_s, 1.0) * j.gpus for j in in_window) / (hi - window[0] * DAY)
    largest = max((math.ceil(j.gpus / gpus_per_node) for j in raw), default=1)
    count = max(math.ceil(offered / target_util / gpus_per_node), largest, 1)
    jobs = []
    for j in raw:
        tasks, per = task_shape(j.gpus, gpus_per_node)
        group = TaskGroup("main", tasks, Resources.parse({"cpu": 1, "nvidia.com/gpu": per}))
        runtime = max(j.duration_s, 1.0)
        spec = JobSpec(f"p{j.line}", (group,), walltime_s=runtime, submit_time=j.submit_s - lo)
        jobs.append(SimJob(spec, runtime))
    meter = (window[0] * DAY - lo, hi - lo)
    desc = (
        f"philly.csv, days {window[0]:g}-{window[1]:g} (+{(window[0] * DAY - lo) / DAY:g} d "
        f"warm-up), {count} nodes × {gpus_per_node} GPUs (offered load {target_util:.0%})"
    )
    return Case("Philly", "gpu", gpu_nodes(count, gpus_per_node), tuple(jobs), meter, desc)


def philly_vc_case(trace_dir: Path, window: tuple[float, float], warmup_days: float) -> Case:
    """Philly jobs of ``window`` (and the warm-up) on the cluster as the Helios authors'
    simulator partitions it (``philly_vc.csv``: 11 virtual clusters, 352 nodes, taken as 8-GPU
    nodes): each VC is a pool of its own and each job may only run in its VC, so one VC's jobs
    queue while another's nodes are idle. Jobs of the VCs the file does not size (18 of the
    trace's 82,247) are left out."""
    sizes = load_philly_vcs(trace_dir / "philly_vc.csv")
    lo = max(0.0, (window[0] - warmup_days) * DAY)
    hi = window[1] * DAY
    res = Resources.parse({"cpu": 64, "memory": "512Gi", "nvidia.com/gpu": 8})
    nodes = tuple(
        NodeSpec(f"{vc}-{i:03d}", res, {LABEL_POOL: vc})
        for vc in sorted(sizes)
        for i in range(sizes[vc])
    )
    jobs = []
    for j in load_philly_jobs(trace_dir / "philly.csv"):
        if not lo <= j.submit_s < hi or j.vc not in sizes:
            continue
        tasks, per = task_shape(j.gpus, 8)
        group = TaskGroup("main", tasks, Resources.parse({"cpu": 1, "nvidia.com/gpu": per}))
        runtime = max(j.duration_s, 1.0)
        spec = JobSpec(
            f"p{j.line}",
            (group,),
            walltime_s=runtime,
            submit_time=j.submit_s - lo,
            placement=Placement(node_selector={LABEL_POOL: j.vc}),
        )
        jobs.append(SimJob(spec, runtime))
    meter = (window[0] * DAY - lo, hi - lo)
    desc = (
        f"philly.csv, days {window[0]:g}-{window[1]:g} (+{(window[0] * DAY - lo) / DAY:g} d "
        f"warm-up), Helios' VC partition: {len(sizes)} VCs, {len(nodes)} nodes × 8 GPUs"
    )
    return Case("Philly-VC", "gpu", nodes, tuple(jobs), meter, desc)


@dataclass(frozen=True, slots=True)
class Outcome:
    case: str
    policy: str
    report: PowerReport
    jobs: int
    wait_mean_s: float
    wait_p95_s: float
    wall_s: float
    samples: list[tuple[float, float, int, int]]
    pool_busy: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    placement: str = "first-fit"
    spans: dict[str, tuple[float, float]] = field(default_factory=dict)  # job: (start, end)


def saving_policy(label: str) -> str:
    """The power-saving policy of a run's label (``"surge + best-fit"``: ``surge``)."""
    return label.split(" + ", 1)[0]


def run_policy(
    case: Case,
    policy: str,
    config: SavingConfig,
    margin: float,
    keep_s: float = 1800.0,
    label: str | None = None,
    rise: tuple[float | None, float | None] = (RISE_WAKE, RISE_KEEP),
    surge_days: int = PowerSetup().surge_memory_days,
    placement: str = "first-fit",
) -> Outcome:
    power = PowerSim(
        PowerSetup(
            policy,
            config,
            meter=case.meter,
            forecast_margin=margin,
            keep_lookahead_s=keep_s,
            rise_margin=rise[0],
            rise_keep_margin=rise[1],
            surge_memory_days=surge_days,
            record=True,
        )
    )
    sim = Simulation(case.nodes, case.jobs, CoreConfig(placement=placement), power=power)
    t0 = time.perf_counter()
    result = sim.run()
    wall = time.perf_counter() - t0
    assert result.power is not None
    lo, hi = case.meter
    waits = np.array(
        [
            o.start - o.submit
            for o in result.outcomes
            if lo <= o.submit < hi and not o.rejected and o.start == o.start
        ]
    )
    return Outcome(
        case.name,
        label or policy,
        result.power,
        int(waits.size),
        float(waits.mean()) if waits.size else 0.0,
        float(np.percentile(waits, 95)) if waits.size else 0.0,
        wall,
        power.samples,
        power.pool_busy,
        placement,
        {
            o.job_id: (o.start, o.end if o.end == o.end else math.inf)
            for o in result.outcomes
            if o.start == o.start
        },
    )


def row(out: Outcome, base: Outcome) -> dict[str, Any]:
    r = out.report
    saved = 1.0 - r.energy_kwh / base.report.energy_kwh if base.report.energy_kwh else 0.0
    if base.wait_mean_s > 0:
        more: float | None = out.wait_mean_s / base.wait_mean_s - 1.0
    else:  # nobody waits always-on: any wait is infinitely more, none is no more
        more = None if out.wait_mean_s > 0 else 0.0
    return {
        "case": out.case,
        "policy": out.policy,
        "placement": out.placement,
        "kwh": r.energy_kwh,
        "kwh_per_month": r.kwh_per_month,
        "mean_kw": r.mean_power_kw,
        "saved": saved,
        "wait_mean_s": out.wait_mean_s,
        "wait_p95_s": out.wait_p95_s,
        "more_wait": more,
        "jobs": out.jobs,
        "suspends": r.suspends,
        "resumes": r.resumes,
        "failed": r.failed,
        "node_hours": dict(r.node_hours),
        "wall_s": out.wall_s,
    }


def more_text(more: float | None) -> str:
    """The extra mean wait as a signed percentage; ``None`` (none always-on, some here) as ∞."""
    return "+∞ (no wait always-on)" if more is None else f"{more:+.1%}"


def node_model(case: Case) -> PowerModel:
    """The power model of the case's nodes (every case has one node type)."""
    return PowerSetup().models[default_node_type(case.nodes[0])]


def saving_ceiling(case: Case, always_on: PowerReport) -> float:
    """The most any power saving could save: every idle node-hour of always-on suspended at
    no cost (per node type: idle minus suspended watts)."""
    model = node_model(case)
    saved = always_on.node_hours["idle"] * (model.node_idle_w - model.suspended_w) / 1000.0
    return saved / always_on.energy_kwh if always_on.energy_kwh else 0.0


def zero_wait_bound(case: Case, always_on: Outcome) -> float:
    """The most a power saving that keeps always-on's schedule (its start times and busy nodes
    per pool) could save: a node busy at time t' must be powered or booting from t' − wake_s
    on, so at every tick at least the largest busy count of the next wake_s is awake in each
    pool (always-on's busy counts per pool, ``Outcome.pool_busy``); every other node is taken
    as suspended at no cost (no boot or shut-down energy). A clairvoyant bound: it knows every
    arrival. (A policy that packs jobs onto fewer nodes than always-on, or moves energy out of
    the window, is not bound by it.)"""
    if saving_policy(always_on.policy) != "always-on":
        raise ValueError(f"the zero-wait bound is computed from always-on, not {always_on.policy}")
    if not always_on.pool_busy or not always_on.report.energy_kwh:
        return 0.0
    model = node_model(case)
    sizes = Counter(n.labels.get(LABEL_POOL, DEFAULT_POOL) for n in case.nodes)
    size = np.array([sizes[p] for p in sorted(sizes)], dtype=np.float64)
    times = np.array([t for t, _ in always_on.pool_busy])
    busy = np.array([b for _, b in always_on.pool_busy], dtype=np.float64)
    # the largest busy count over [t, t + wake_s]: a running maximum over the next ticks
    ahead = np.searchsorted(times, times + model.wake_s, side="right")
    needed = np.array([busy[k : max(k + 1, j)].max(axis=0) for k, j in enumerate(ahead)])
    lo, hi = case.meter
    # each tick stands for the time to the next (the last one to the window's end), clipped
    # to the metering window
    ends = np.append(times[1:], max(times[-1], hi))
    step = np.clip(ends, lo, hi) - np.clip(times, lo, hi)
    off_node_s = float(((size - needed) * step[:, None]).sum())
    saved_kwh = off_node_s * (model.node_idle_w - model.suspended_w) / 3.6e6
    return saved_kwh / always_on.report.energy_kwh


def packing_bound(case: Case, always_on: Outcome) -> float:
    """The ceiling if every job ran on as few nodes as its pool's capacity allows: with
    always-on's start and end times, each pool keeps powered only ⌈the running jobs'
    node-equivalents⌉ (per job, its largest share of a node's CPUs or GPUs; the fractional
    bin-packing bound) and every other node-second is suspended at no cost. No placement leaves
    fewer nodes busy, and always-on's energy is the same for every placement (power is linear
    in utilisation), so no placement of always-on's schedule can raise the ceiling above it."""
    if saving_policy(always_on.policy) != "always-on":
        raise ValueError(f"the packing bound is computed from always-on, not {always_on.policy}")
    if not always_on.report.energy_kwh:
        return 0.0
    model = node_model(case)
    pools = sorted({n.labels.get(LABEL_POOL, DEFAULT_POOL) for n in case.nodes})
    size = Counter(n.labels.get(LABEL_POOL, DEFAULT_POOL) for n in case.nodes)
    cap = {
        p: [
            max(
                n.capacity.get(res)
                for n in case.nodes
                if n.labels.get(LABEL_POOL, DEFAULT_POOL) == p
            )
            for res in (CPU, GPU)
        ]
        for p in pools
    }
    events: dict[str, list[tuple[float, float]]] = {p: [] for p in pools}
    for job in case.jobs:
        span = always_on.spans.get(job.spec.id)
        if span is None:
            continue
        pool = job.spec.placement.node_selector.get(LABEL_POOL)
        if pool is None and len(pools) > 1:
            raise ValueError(f"job {job.spec.id} runs in no one pool of several")
        pool = pool or pools[0]
        total = job.spec.total
        share = max(total.get(res) / c for res, c in zip((CPU, GPU), cap[pool], strict=True) if c)
        events[pool] += [(span[0], share), (span[1], -share)]
    lo, hi = case.meter
    off_node_s = 0.0
    for pool, changes in events.items():
        changes.sort()
        times = np.array([lo] + [t for t, _ in changes] + [hi])
        running = np.concatenate(([0.0], np.cumsum([d for _, d in changes]), [0.0]))
        step = np.diff(np.clip(times, lo, hi))
        needed = np.ceil(running[:-1] - 1e-9)
        off_node_s += float(((size[pool] - needed) * step).sum())
    saved_kwh = off_node_s * (model.node_idle_w - model.suspended_w) / 3.6e6
    return saved_kwh / always_on.report.energy_kwh


def verdict(
    rows: Sequence[dict[str, Any]], suffix: str = "", baseline: str = "idle-timeout"
) -> dict[str, dict[str, bool]]:
    """The issue's goal for each forecast-driven policy's main run (not the sweep's variants),
    or for its run labelled ``policy + suffix`` (``--with-placement``), against the
    ``baseline`` row; saved and extra wait are against the rows' always-on. Candidates without
    a row (``surge-room`` in bench/energy_survey.py) are left out."""
    by = {r["policy"]: r for r in rows}
    it = by[baseline]
    return {
        name: {
            "saves_20pct": by[name]["saved"] >= GOAL_SAVING,
            "wait_under_5pct": by[name]["more_wait"] is not None
            and by[name]["more_wait"] < GOAL_WAIT,
            "beats_idle_timeout_energy": by[name]["kwh"] < it["kwh"],
            "beats_idle_timeout_wait": by[name]["wait_mean_s"] < it["wait_mean_s"],
        }
        for name in (c + suffix for c in CANDIDATES)
        if name in by
    }


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| trace | policy | kWh/month | saved vs always-on | mean wait | p95 wait "
        "| more mean wait | suspends | resumes | ceiling | zero-wait bound |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['policy']} | {r['kwh_per_month']:,.0f} | {r['saved']:+.1%} "
            f"| {r['wait_mean_s'] / 60:,.1f} min | {r['wait_p95_s'] / 60:,.1f} min "
            f"| {more_text(r['more_wait'])} | {r['suspends']:,} | {r['resumes']:,} "
            f"| {r['ceiling']:.1%} | {r.get('zero_wait_bound', float('nan')):.1%} |"
        )
    return "\n".join(lines)


def plot(results: dict[str, list[Outcome]], rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(results)
    colours = {
        "always-on": "#777777",
        "idle-timeout": "#1f77b4",
        "forecast": "#2ca02c",
        "predictive": "#d62728",
        "surge": "#9467bd",
        "surge-room": "#ff7f0e",
    }
    ncols = min(len(cases), 2)
    nrows = math.ceil(len(cases) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.5 * ncols, 4.6 * nrows), squeeze=False)
    for ax in axes.flat[len(cases) :]:
        ax.set_visible(False)
    for ax, case in zip(axes.flat, cases, strict=False):
        mine = [r for r in rows if r["case"] == case]
        for family, colour in colours.items():
            line = sorted(
                (r for r in mine if r["policy"].split()[0] == family),
                key=lambda r: r["wait_mean_s"],
            )
            if len(line) > 1:
                ax.plot(
                    [r["wait_mean_s"] / 60 for r in line],
                    [r["kwh_per_month"] / 1000 for r in line],
                    color=colour,
                    lw=0.8,
                    alpha=0.6,
                )
        for r in mine:
            main = r["policy"] in RUN
            ax.scatter(
                r["wait_mean_s"] / 60,
                r["kwh_per_month"] / 1000,
                s=80 if main else 25,
                c=colours[r["policy"].split()[0]],
                zorder=3,
            )
            text = (
                f" {r['policy']}\n {r['saved']:+.1%} kWh, {more_text(r['more_wait'])} wait"
                if main
                else f" {r['policy'].split(' ', 1)[1]}"
            )
            ax.annotate(
                text, (r["wait_mean_s"] / 60, r["kwh_per_month"] / 1000), fontsize=8 if main else 6
            )
        ax.set_title(case)
        ax.set_xlabel("mean wait of jobs submitted in the window (min)")
        ax.set_ylabel("energy (MWh per 30-day month)")
        ax.grid(alpha=0.3)
        ax.margins(x=0.35, y=0.15)
    fig.suptitle("Energy against wait, per power-saving policy (lower left is better)")
    fig.tight_layout()
    fig.savefig(out / "energy_vs_wait.png", dpi=120)
    plt.close(fig)
    fig, axes = plt.subplots(len(cases), 1, figsize=(11, 3.2 * len(cases)), squeeze=False)
    for ax, case in zip(axes[:, 0], cases, strict=True):
        for o in results[case]:
            if not o.samples or o.policy not in RUN:
                continue
            t = np.array([s[0] for s in o.samples]) / DAY
            kw = np.array([s[1] for s in o.samples]) / 1000
            ax.plot(t, kw, lw=0.7, label=o.policy, color=colours[o.policy])
        lo, hi = results[case][0].report.start_s / DAY, results[case][0].report.end_s / DAY
        ax.axvspan(lo, hi, color="#ffeeaa", alpha=0.3, lw=0)
        ax.set_title(f"{case}: cluster power (shaded: the measured window)")
        ax.set_xlabel("days from the start of the warm-up")
        ax.set_ylabel("kW")
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "power_over_time.png", dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--swf", type=Path, default=DEFAULT_SWF)
    p.add_argument("--swf-window", type=day_window, default=(540.0, 570.0), help="days FROM:TO")
    p.add_argument("--philly-dir", type=Path, default=DEFAULT_PHILLY)
    p.add_argument("--gpu-window", type=day_window, default=(28.0, 42.0), help="days FROM:TO")
    p.add_argument("--warmup", type=float, default=3.0, help="days replayed before a window")
    p.add_argument("--target-util", type=float, default=0.7, help="Philly cluster sizing")
    p.add_argument(
        "--extra-util",
        type=float,
        nargs="*",
        default=[],
        help="also run Philly on clusters sized for these offered loads (sensitivity)",
    )
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--idle-threshold", type=float, default=1800.0, help="idle-timeout (s)")
    p.add_argument("--margin", type=float, default=0.5, help="forecast: error std added")
    p.add_argument("--min-idle", type=float, default=300.0, help="forecast: hysteresis (s)")
    p.add_argument("--short-idle", type=float, default=120.0, help="predictive: early (s)")
    p.add_argument("--rise-margin", type=float, default=RISE_WAKE, help="predictive: wake")
    p.add_argument("--rise-keep-margin", type=float, default=RISE_KEEP, help="predictive: keep")
    p.add_argument("--rate", type=int, default=0, help="suspends/resumes per minute (0: any)")
    p.add_argument(
        "--placement",
        choices=tuple(PLACEMENT_POLICIES),
        default="first-fit",
        help="the core's placement in every run (default first-fit, the core's default)",
    )
    p.add_argument(
        "--with-placement",
        choices=tuple(PLACEMENT_POLICIES),
        help="also run every policy with this placement (rows 'POLICY + NAME'), judged against "
        "idle-timeout under both placements",
    )
    p.add_argument(
        "--sweep",
        action="store_true",
        help="also run idle-timeout at 600/3600/7200 s, forecast at margin 0/1 and surge with 1 "
        "and 3 days of memory (frontiers)",
    )
    p.add_argument(
        "--skip",
        choices=("swf", "gpu", "vc"),
        nargs="*",
        default=[],
        help="cases to leave out: the SWF trace, Philly sized by load, Philly in Helios' VCs",
    )
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "energy")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    if args.with_placement == args.placement:
        p.error(f"--with-placement {args.with_placement} is already the --placement")

    sys.path.insert(0, str(ROOT / "bench"))
    from machine_info import machine

    info = machine()
    print(
        f"machine: {info['cpu']}, {info['cores']} cores ({info['usable_cores']} usable), "
        f"Python {info['python']}, git {info['git']}, src {info['src_sha256']}, "
        f"load {info['loadavg_at_start']:.2f}",
        flush=True,
    )
    config = SavingConfig(
        idle_threshold_s=args.idle_threshold,
        forecast_min_idle_s=args.min_idle,
        predictive_min_idle_s=args.short_idle,
        max_suspends_per_min=args.rate,
        max_resumes_per_min=args.rate,
    )
    t0 = time.perf_counter()
    cases: list[Case] = []
    try:
        if "swf" not in args.skip:
            cases.append(swf_case(args.swf, args.swf_window, args.warmup))
        if "gpu" not in args.skip:
            for util in [args.target_util, *args.extra_util]:
                case = philly_case(
                    args.philly_dir, args.gpu_window, args.warmup, util, args.gpus_per_node
                )
                if util != args.target_util:
                    case = replace(case, name=f"Philly@{util:.0%}")
                cases.append(case)
        if "vc" not in args.skip:
            cases.append(philly_vc_case(args.philly_dir, args.gpu_window, args.warmup))
    except (OSError, ValueError) as exc:  # a missing or malformed trace file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    empty = [case.name for case in cases if measured_jobs(case) == 0]
    if empty:  # nothing to measure: every policy would report the same idle cluster
        print(
            f"error: no jobs submitted in the window of {', '.join(empty)} "
            "(--swf-window / --gpu-window, days from the trace's first submission)",
            file=sys.stderr,
        )
        return 2
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    results: dict[str, list[Outcome]] = {}
    rows: list[dict[str, Any]] = []
    verdicts: dict[str, dict[str, dict[str, bool]]] = {}
    for case in cases:
        print(f"{case.name}: {case.description}, {len(case.jobs):,} jobs", flush=True)
        outs = []
        for policy in RUN:
            rise = (args.rise_margin, args.rise_keep_margin)
            out = run_policy(case, policy, config, args.margin, rise=rise, placement=args.placement)
            outs.append(out)
            report_run(out)
        if args.sweep:
            days = PowerSetup().surge_memory_days
            variants = (
                [
                    (
                        f"idle-timeout T={t:g}s",
                        "idle-timeout",
                        replace(config, idle_threshold_s=t),
                        0.0,
                        days,
                    )
                    for t in (600.0, 3600.0, 7200.0)
                ]
                + [(f"forecast m={m:g}", "forecast", config, m, days) for m in (0.0, 1.0)]
                + [(f"surge {d}d", "surge", config, args.margin, d) for d in (1, 3)]
            )
            for label, policy, variant, margin, memory in variants:
                out = run_policy(
                    case,
                    policy,
                    variant,
                    margin,
                    label=label,
                    surge_days=memory,
                    placement=args.placement,
                )
                outs.append(out)
                print(
                    f"  {label:>22}: {out.report.energy_kwh:,.0f} kWh, "
                    f"mean wait {out.wait_mean_s / 60:.1f} min, {out.wall_s:.1f} s",
                    flush=True,
                )
        suffix = f" + {args.with_placement}" if args.with_placement else ""
        for policy in RUN if suffix else ():
            rise = (args.rise_margin, args.rise_keep_margin)
            out = run_policy(
                case,
                policy,
                config,
                args.margin,
                label=policy + suffix,
                rise=rise,
                placement=args.with_placement,
            )
            outs.append(out)
            report_run(out)
        results[case.name] = outs
        case_rows = [row(o, outs[0]) for o in outs]
        ceiling = saving_ceiling(case, outs[0].report)
        bound = zero_wait_bound(case, outs[0])
        packed = packing_bound(case, outs[0])
        for r in case_rows:
            r["ceiling"] = ceiling
            r["zero_wait_bound"] = bound
            r["packing_bound"] = packed
        if suffix:  # the other placement's rows: also against its own always-on
            own = next(o for o in outs if o.policy == "always-on" + suffix)
            own_ceiling = saving_ceiling(case, own.report)
            own_bound = zero_wait_bound(case, own)
            for r, o in zip(case_rows, outs, strict=True):
                if o.placement == args.with_placement:
                    same = row(o, own)
                    r["saved_same_placement"] = same["saved"]
                    r["more_wait_same_placement"] = same["more_wait"]
                    r["ceiling"] = own_ceiling
                    r["zero_wait_bound"] = own_bound
        rows.extend(case_rows)
        verdicts[case.name] = verdict(case_rows)
        for base in ("idle-timeout", "idle-timeout" + suffix) if suffix else ():
            verdicts[f"{case.name}{suffix} vs {base}"] = verdict(case_rows, suffix, base)
        print(
            f"  ceiling (every idle node-hour suspended at no cost): {ceiling:.1%}; "
            f"zero-wait bound (clairvoyant, no job waits longer): {bound:.1%}; "
            f"packing bound (as few nodes busy as capacity allows): {packed:.1%}; "
            f"goal: {verdicts[case.name]}",
            flush=True,
        )
        for base in ("idle-timeout", "idle-timeout" + suffix) if suffix else ():
            print(f"  goal{suffix} vs {base}: {verdicts[f'{case.name}{suffix} vs {base}']}")
    text = table(rows)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(text + "\n", encoding="utf-8")
    models = {name: {**vars_of(m)} for name, m in DEFAULT_MODELS.items()}
    payload = {
        "command": " ".join(["bench/energy_sim.py", *(argv if argv is not None else sys.argv[1:])]),
        "machine": info,
        "cases": [
            {"name": c.name, "description": c.description, "jobs": len(c.jobs), "meter": c.meter}
            for c in cases
        ],
        "config": {
            "idle_threshold_s": args.idle_threshold,
            "forecast_min_idle_s": args.min_idle,
            "forecast_margin": args.margin,
            "predictive_min_idle_s": args.short_idle,
            "rise_margin": args.rise_margin,
            "rise_keep_margin": args.rise_keep_margin,
            "rate_per_min": args.rate,
            "placement": args.placement,
            "with_placement": args.with_placement,
            "surge_min_idle_s": config.surge_min_idle_s,
            "surge_memory_days": PowerSetup().surge_memory_days,
            "surge_warm_s": PowerSetup().surge_warm_s,
        },
        "power_models": models,
        "rows": rows,
        "goal": verdicts,
        "wall_s": time.perf_counter() - t0,
    }
    (args.out / "results.json").write_text(json.dumps(payload, indent=2) + "\n", "utf-8")
    if not args.no_plots:
        plot(results, rows, args.out)
    print(f"done in {time.perf_counter() - t0:.1f} s; wrote {args.out}", flush=True)
    return 0


def report_run(out: Outcome) -> None:
    rep = out.report
    print(
        f"  {out.policy:>12}: {rep.energy_kwh:,.0f} kWh ({rep.kwh_per_month:,.0f}/month), "
        f"mean wait {out.wait_mean_s / 60:.1f} min over {out.jobs:,} jobs, "
        f"{rep.suspends:,} suspends, {rep.resumes:,} resumes, {out.wall_s:.1f} s",
        flush=True,
    )


def vars_of(model: PowerModel) -> dict[str, float]:
    return {f.name: getattr(model, f.name) for f in fields(model)}


if __name__ == "__main__":
    raise SystemExit(main())
