"""Tenancy on a real trace: Philly's virtual clusters (VCs) as tenants, with and without lending.

One queue per VC (philly_vc.csv), its nominal GPU quota = its node count × ``--gpus-per-vc-node``;
the cluster has exactly the sum of the nominal quotas, on nodes of ``--gpus-per-node`` GPUs. The
same job stream (philly.csv, a time window of it) is simulated in one run under:

* ``none``  — no lending: every queue outside any cohort, limited to its nominal quota;
* ``lend``  — one cohort, no borrowing or lending limits; only preemptible tiers (silver, bronze)
  borrow, and a lender whose job is blocked within its nominal quota reclaims by preemption;
* ``fair``  — ``lend`` with the ``multifactor`` queue order (Fair Tree fair share by VC).

Per mode it reports GPU utilisation, waits and JCTs, preemptions and GPU-hours lost, each VC's
*guarantee violation* episodes (time the VC had a queued job fitting within its unused nominal
quota) against the reclaim bound, and each VC's long-run share of GPU-hours against its target.

Every core step is recorded by wrapping ``Simulation.core.step`` (the engine is not changed): the
time, the arrivals and exits it was given, and the starts and preemption notices it returned;
after each step the phase of every exited job says whether it was requeued.

Run: ``.venv/bin/python bench/tenancy_philly.py --window 21:35 --out docs/figures/tenancy``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cli_args import day_window
from fusesched.model.events import (
    Decision,
    Event,
    JobExited,
    JobSubmitted,
    PreemptJob,
    StartJob,
)
from fusesched.model.job import JobSpec, QoS, TaskGroup
from fusesched.model.node import NodeSpec
from fusesched.model.resources import Resources
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.policies.victims import VICTIM_ORDERS
from fusesched.sim.engine import SimJob, Simulation
from fusesched.traces.philly import load_philly_jobs, load_philly_vcs, task_shape

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE_DIR = ROOT.parent / "shared" / "traces" / "philly"
MODES = ("none", "lend", "fair")
DAY = 86400.0


# ----------------------------------------------------------------------------- workload


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of the stream, independent of how it is scheduled."""

    id: str
    vc: str
    submit: float
    runtime: float
    gpus: int
    qos: QoS = QoS.SILVER


def philly_stream(
    trace_dir: Path,
    window: tuple[float, float] | None,
    limit: int | None,
    bronze_fraction: float,
    seed: int,
    warmup_days: float = 0.0,
) -> tuple[list[TraceJob], dict[str, int], int]:
    """Jobs of the listed VCs submitted in ``window`` (days from the trace's first submission)
    widened by ``warmup_days`` before it, times shifted so the stream starts at 0; the VC node
    counts; and how many jobs of unlisted VCs were dropped."""
    vcs = load_philly_vcs(trace_dir / "philly_vc.csv")
    raw = load_philly_jobs(trace_dir / "philly.csv")
    lo, hi = (window[0] * DAY, window[1] * DAY) if window else (0.0, math.inf)
    lo = max(0.0, lo - warmup_days * DAY)
    picked = [j for j in raw if lo <= j.submit_s < hi]
    dropped = sum(1 for j in picked if j.vc not in vcs)
    picked = [j for j in picked if j.vc in vcs][:limit]
    rng = np.random.default_rng(seed)
    bronze = rng.random(len(picked)) < bronze_fraction
    jobs = [
        TraceJob(
            f"p{j.line}",
            j.vc,
            j.submit_s - lo if window else j.submit_s,
            max(j.duration_s, 1.0),
            j.gpus,
            QoS.BRONZE if b else QoS.SILVER,
        )
        for j, b in zip(picked, bronze.tolist(), strict=True)
    ]
    return jobs, vcs, dropped


def tenancy_config(nominal: Mapping[str, int], lending: bool) -> TenancyConfig:
    """One tenant, one queue per VC with a GPU quota; one cohort (no limits) when lending."""
    queues = [
        {
            "name": vc,
            "shares": float(gpus),
            "users": {vc: 1},
            **({"cohort": "philly"} if lending else {}),
            "flavors": [{"name": "gpu", "resources": {"nvidia.com/gpu": {"nominal": gpus}}}],
        }
        for vc, gpus in nominal.items()
    ]
    return TenancyConfig.from_dict(
        {
            "flavors": [{"name": "gpu", "resources": ["nvidia.com/gpu"]}],
            "cohorts": ["philly"] if lending else [],
            "organisations": [{"name": "philly", "tenants": [{"name": "vcs", "queues": queues}]}],
        }
    )


def cluster(total_gpus: int, gpus_per_node: int) -> list[NodeSpec]:
    """``total_gpus`` on nodes of ``gpus_per_node`` (the last one smaller if needed)."""
    out: list[NodeSpec] = []
    left = total_gpus
    while left > 0:
        gpus = min(left, gpus_per_node)
        res = Resources.parse({"cpu": 64, "memory": "512Gi", "nvidia.com/gpu": gpus})
        out.append(NodeSpec(f"n{len(out)}", res, {}))
        left -= gpus
    return out


def sim_jobs(
    jobs: Sequence[TraceJob], gpus_per_node: int, checkpoint_s: float | None
) -> list[SimJob]:
    """Specs the core sees: queue = user = VC, walltime = the true runtime (exact estimates for
    EASY backfilling), one CPU per task, a job larger than a node split by ``task_shape``."""
    out = []
    for j in jobs:
        tasks, per = task_shape(j.gpus, gpus_per_node)
        group = TaskGroup("main", tasks, Resources.parse({"cpu": 1, "nvidia.com/gpu": per}))
        spec = JobSpec(
            j.id,
            (group,),
            tenant="vcs",
            queue=j.vc,
            user=j.vc,
            qos=j.qos,
            walltime_s=j.runtime,
            submit_time=j.submit,
            checkpoint_interval_s=checkpoint_s,
        )
        out.append(SimJob(spec, j.runtime))
    return out


# ----------------------------------------------------------------------------- recording


@dataclass(slots=True)
class Step:
    now: float
    submitted: list[str]
    exited: list[tuple[str, bool]]  # (job, requeued)
    started: list[str]
    notices: list[tuple[str, float]]  # (job, grace)


@dataclass(slots=True)
class Run:
    """One simulated mode: the recorded steps and per-job facts."""

    mode: str
    steps: list[Step]
    jobs: dict[str, TraceJob]
    nominal: dict[str, int]
    capacity: int
    lost_s: dict[str, float]
    preemptions: dict[str, int]
    wall_s: float
    end_phase: dict[str, str] = field(default_factory=dict)


def simulate(
    mode: str,
    jobs: Sequence[TraceJob],
    nominal: Mapping[str, int],
    *,
    gpus_per_node: int = 8,
    checkpoint_s: float | None = 1800.0,
    seed: int = 0,
    backfill: str = "easy",
    half_life_s: float = DAY,
    recalc_s: float = 300.0,
    victim_order: str = "checkpoint-aware",
    borrow_backoff_s: float = 0.0,
) -> Run:
    """Simulate ``jobs`` under ``mode`` (``none``, ``lend``, ``fair``), recording every step."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    policy = TenancyPolicy(
        tenancy_config(nominal, lending=mode != "none"),
        half_life_s=half_life_s,
        recalc_s=recalc_s,
        victim_order=victim_order,
        borrow_backoff_s=borrow_backoff_s,
    )
    order = "multifactor" if mode == "fair" else "fcfs"
    config = CoreConfig(queue_order=order, backfill=backfill, tenancy=policy)
    capacity = sum(nominal.values())
    sim = Simulation(
        cluster(capacity, gpus_per_node),
        sim_jobs(jobs, gpus_per_node, checkpoint_s),
        config,
        seed=seed,
    )
    core = sim.core
    steps: list[Step] = []
    inner: Callable[[float, Iterable[Event]], list[Decision]] = core.step

    def step(now: float, events: Iterable[Event] = ()) -> list[Decision]:
        events = list(events)
        out = inner(now, events)
        exited = [e.job_id for e in events if isinstance(e, JobExited)]
        steps.append(
            Step(
                now,
                [e.job.id for e in events if isinstance(e, JobSubmitted)],
                [(j, not core.jobs[j].phase.terminal) for j in exited],
                [d.job_id for d in out if isinstance(d, StartJob)],
                [(d.job_id, d.grace_s) for d in out if isinstance(d, PreemptJob)],
            )
        )
        return out

    core.step = step  # type: ignore[method-assign]
    t0 = time.perf_counter()
    result = sim.run()
    wall = time.perf_counter() - t0
    return Run(
        mode,
        steps,
        {j.id: j for j in jobs},
        dict(nominal),
        capacity,
        {o.job_id: o.lost_s for o in result.outcomes},
        {o.job_id: o.preemptions for o in result.outcomes},
        wall,
        {j: str(r.phase) for j, r in core.jobs.items()},
    )


@dataclass(slots=True)
class Series:
    """Piecewise-constant state after each step: ``times[i]`` to ``times[i + 1]``."""

    times: np.ndarray  # step times (the last one closes the last interval)
    usage: dict[str, np.ndarray]  # VC -> GPUs running
    queued: dict[str, np.ndarray]  # VC -> GPUs queued
    smallest: dict[str, np.ndarray]  # VC -> smallest queued job's GPUs (0: none queued)
    deficit: dict[str, np.ndarray]  # VC -> guaranteed GPUs demanded but not in use
    starts: dict[str, list[float]]  # job -> start times
    submit: dict[str, float]
    first_start: dict[str, float]
    last_end: dict[str, float]


def series(run: Run) -> Series:
    vcs = list(run.nominal)
    index = {vc: i for i, vc in enumerate(vcs)}
    n = len(run.steps)
    usage = np.zeros((n, len(vcs)), dtype=np.int64)
    queued = np.zeros((n, len(vcs)), dtype=np.int64)
    smallest = np.zeros((n, len(vcs)), dtype=np.int64)
    deficit = np.zeros((n, len(vcs)), dtype=np.int64)
    nominal = [run.nominal[vc] for vc in vcs]
    use = np.zeros(len(vcs), dtype=np.int64)
    waiting: list[Counter[int]] = [Counter() for _ in vcs]
    qsum = np.zeros(len(vcs), dtype=np.int64)
    starts: dict[str, list[float]] = {}
    first_start: dict[str, float] = {}
    last_end: dict[str, float] = {}
    times = np.array([s.now for s in run.steps], dtype=np.float64)
    for i, s in enumerate(run.steps):
        for job_id in s.submitted:
            j = run.jobs[job_id]
            waiting[index[j.vc]][j.gpus] += 1
            qsum[index[j.vc]] += j.gpus
        for job_id, requeued in s.exited:
            j = run.jobs[job_id]
            k = index[j.vc]
            use[k] -= j.gpus
            last_end[job_id] = s.now
            if requeued:
                waiting[k][j.gpus] += 1
                qsum[k] += j.gpus
        for job_id in s.started:
            j = run.jobs[job_id]
            k = index[j.vc]
            use[k] += j.gpus
            waiting[k][j.gpus] -= 1
            if not waiting[k][j.gpus]:
                del waiting[k][j.gpus]
            qsum[k] -= j.gpus
            starts.setdefault(job_id, []).append(s.now)
            first_start.setdefault(job_id, s.now)
        usage[i] = use
        queued[i] = qsum
        smallest[i] = [min(w) if w else 0 for w in waiting]
        for k, w in enumerate(waiting):
            free = nominal[k] - int(use[k])
            if w and free > 0:
                fits = sum(size * count for size, count in w.items() if size <= free)
                deficit[i, k] = min(free, fits)
    return Series(
        times,
        {vc: usage[:, k] for vc, k in index.items()},
        {vc: queued[:, k] for vc, k in index.items()},
        {vc: smallest[:, k] for vc, k in index.items()},
        {vc: deficit[:, k] for vc, k in index.items()},
        starts,
        {j.id: j.submit for j in run.jobs.values()},
        first_start,
        last_end,
    )


def episodes(times: np.ndarray, flag: np.ndarray) -> list[tuple[float, float]]:
    """Maximal intervals where ``flag`` holds (state after step i lasts to step i + 1)."""
    out = []
    begin: float | None = None
    for t, f in zip(times.tolist(), flag.tolist(), strict=True):
        if f and begin is None:
            begin = t
        elif not f and begin is not None:
            out.append((begin, t))
            begin = None
    if begin is not None:
        out.append((begin, float(times[-1])))
    return out


def violations(run: Run, s: Series) -> dict[str, list[tuple[float, float]]]:
    """Per VC, the episodes when a queued job of the VC fit within its unused nominal quota
    (so the VC ran below min(nominal, its demand))."""
    out = {}
    for vc, nominal in run.nominal.items():
        small = s.smallest[vc]
        flag = (small > 0) & (small <= nominal - s.usage[vc])
        out[vc] = [(a, b) for a, b in episodes(s.times, flag) if b > a]
    return out


def deficit_latencies(
    times: np.ndarray, deficit: np.ndarray, since: float = -math.inf, until: float = math.inf
) -> list[float]:
    """How long each unit of a VC's guaranteed demand waited to be served, first in first out:
    a rise of the deficit (``min(unused nominal, queued GPUs of jobs that fit in it)``) queues
    that many GPU units stamped with the time; a fall serves the oldest units. Only units that
    arose in ``[since, until)`` are returned."""
    chunks: deque[list[float]] = deque()  # [since, GPUs]
    out: list[float] = []
    prev = 0
    for t, d in zip(times.tolist(), deficit.tolist(), strict=True):
        if d > prev:
            chunks.append([t, float(d - prev)])
        elif d < prev:
            left = float(prev - d)
            while left > 0 and chunks:
                head = chunks[0]
                take = min(left, head[1])
                if since <= head[0] < until:
                    out.append(t - head[0])
                head[1] -= take
                left -= take
                if head[1] <= 0:
                    chunks.popleft()
        prev = d
    end = float(times[-1])
    out.extend(end - at for at, _ in chunks if since <= at < until)  # never served
    return out


def reclaim_bound(run: Run) -> float:
    """Largest grace of any notice given (the victims' tiers), plus one scheduling step: the
    simulator runs a cycle at the very instant a victim exits, so that step adds nothing."""
    graces = [g for s in run.steps for _, g in s.notices]
    return max(graces, default=0.0)


def water_fill(capacity: float, weights: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Weighted max-min fair split of ``capacity`` among claimants capped at ``caps``."""
    alloc = np.zeros_like(weights, dtype=np.float64)
    active = (caps > 0) & (weights > 0)
    left = float(capacity)
    while active.any() and left > 1e-9:
        share = left * weights * active / float(weights[active].sum())
        room = caps - alloc
        over = active & (share >= room)
        if not over.any():
            alloc += share
            break
        alloc[over] = caps[over]
        left -= float(room[over].sum())
        active &= ~over
    return alloc


def summarize_run(
    run: Run, s: Series, window_end: float, window_start: float = 0.0
) -> dict[str, Any]:
    """The numbers of one mode (times in seconds, GPU-hours in hours), measured over the
    submission window ``[window_start, window_end]`` (before it: warm-up): utilisation, shares
    and violation episodes that begin in it; waits and JCTs of the jobs submitted in it."""
    t = s.times
    dt = np.diff(t)
    vcs = list(run.nominal)
    total_use = np.sum([s.usage[vc] for vc in vcs], axis=0)
    gpu_s = float((total_use[:-1] * dt).sum())
    busy = float(t[-1] - t[0]) if len(t) > 1 else 0.0
    lo_t, hi_t = np.clip(t[:-1], window_start, window_end), np.clip(t[1:], window_start, window_end)
    inwin = hi_t - lo_t
    span = window_end - window_start
    util_window = float((total_use[:-1] * inwin).sum()) / (run.capacity * span)
    measured = [j for j in run.jobs if window_start <= s.submit[j] < window_end]
    done = [j for j in measured if j in s.first_start]
    wait = np.array([s.first_start[j] - s.submit[j] for j in done])
    jct = np.array([s.last_end[j] - s.submit[j] for j in done if j in s.last_end])
    lost_h = sum(run.lost_s[j] * run.jobs[j].gpus for j in run.jobs) / 3600.0
    viol = {
        vc: [(a, b) for a, b in eps if window_start <= a < window_end]
        for vc, eps in violations(run, s).items()
    }
    bound = reclaim_bound(run)
    per_vc: dict[str, Any] = {}
    latencies: list[float] = []
    # fair share over the submission window: achieved GPU-hours vs targets
    active = np.stack([(s.usage[vc] + s.queued[vc]) > 0 for vc in vcs], axis=1)[:-1]
    demand = np.stack([s.usage[vc] + s.queued[vc] for vc in vcs], axis=1)[:-1].astype(float)
    nominal = np.array([run.nominal[vc] for vc in vcs], dtype=np.float64)
    use = np.stack([s.usage[vc] for vc in vcs], axis=1)[:-1].astype(float)
    frac = active * nominal
    denom = frac.sum(axis=1, keepdims=True)
    frac = np.divide(frac, denom, out=np.zeros_like(frac), where=denom > 0)
    used_now = use.sum(axis=1)
    target_simple = (frac * (used_now * inwin)[:, None]).sum(axis=0)
    mm = np.array(
        [water_fill(run.capacity, nominal, demand[i]) for i in range(len(inwin))]
    ).reshape(len(inwin), len(vcs))
    target_mm = (mm * inwin[:, None]).sum(axis=0)
    achieved = (use * inwin[:, None]).sum(axis=0)
    tot_a = achieved.sum() or 1.0
    for k, vc in enumerate(vcs):
        eps = [b - a for a, b in viol[vc]]
        lat = deficit_latencies(s.times, s.deficit[vc], window_start, window_end)
        latencies.extend(lat)
        per_vc[vc] = {
            "nominal": run.nominal[vc],
            "jobs": sum(1 for j in measured if run.jobs[j].vc == vc),
            "gpu_h": float(achieved[k]) / 3600.0,
            "share": float(achieved[k] / tot_a),
            "target_simple": float(target_simple[k] / (target_simple.sum() or 1.0)),
            "target_maxmin": float(target_mm[k] / (target_mm.sum() or 1.0)),
            "violation_episodes": len(eps),
            "violation_max_s": max(eps, default=0.0),
            "violation_total_h": sum(eps) / 3600.0,
            "violations_over_bound": sum(1 for e in eps if e > bound + 1e-6),
            "deficit_wait_max_s": max(lat, default=0.0),
            "deficit_waits_over_bound": sum(1 for e in lat if e > bound + 1e-6),
        }
    all_eps = [b - a for v in viol.values() for a, b in v]
    return {
        "mode": run.mode,
        "sim_wall_s": run.wall_s,
        "jobs": len(measured),
        "started": len(done),
        "unfinished": len(measured) - len(jct),
        # preempted more often than the tenancy policy's max_preemptions: ended, not completed
        "cancelled": sum(1 for j in measured if run.end_phase.get(j) == "cancelled"),
        "util_window": util_window,
        "util_busy": gpu_s / (run.capacity * busy) if busy else 0.0,
        "busy_span_h": busy / 3600.0,
        "wait_mean_s": float(wait.mean()) if wait.size else 0.0,
        "wait_p50_s": float(np.percentile(wait, 50)) if wait.size else 0.0,
        "wait_p95_s": float(np.percentile(wait, 95)) if wait.size else 0.0,
        "jct_mean_s": float(jct.mean()) if jct.size else 0.0,
        "jct_p50_s": float(np.percentile(jct, 50)) if jct.size else 0.0,
        "jct_p95_s": float(np.percentile(jct, 95)) if jct.size else 0.0,
        "jobs_preempted": sum(1 for v in run.preemptions.values() if v),
        "preemptions": sum(run.preemptions.values()),
        "lost_gpu_h": lost_h,
        "reclaim_bound_s": bound,
        "violation_episodes": len(all_eps),
        "violation_max_s": max(all_eps, default=0.0),
        "violations_over_bound": sum(1 for e in all_eps if e > bound + 1e-6),
        "violation_durations_s": sorted(all_eps),
        "deficit_waits": len(latencies),
        "deficit_wait_max_s": max(latencies, default=0.0),
        "deficit_wait_p99_s": float(np.percentile(latencies, 99)) if latencies else 0.0,
        "deficit_waits_over_bound": sum(1 for e in latencies if e > bound + 1e-6),
        "deficit_wait_durations_s": sorted(latencies),
        "fair_dev_simple_max": max(abs(v["share"] - v["target_simple"]) for v in per_vc.values()),
        "fair_dev_maxmin_max": max(abs(v["share"] - v["target_maxmin"]) for v in per_vc.values()),
        "per_vc": per_vc,
    }


# ----------------------------------------------------------------------------- plots


def usage_hourly(s: Series, vcs: Sequence[str], bin_s: float = 3600.0) -> np.ndarray:
    """Mean GPUs in use per bin, per VC (rows: bins)."""
    t = s.times
    nbins = max(1, math.ceil((t[-1] - t[0]) / bin_s))
    edges = t[0] + bin_s * np.arange(nbins + 1)
    out = np.zeros((nbins, len(vcs)))
    for k, vc in enumerate(vcs):
        u = s.usage[vc].astype(float)
        cum = np.concatenate([[0.0], np.cumsum(u[:-1] * np.diff(t))])
        at = np.interp(edges, t, cum)
        out[:, k] = np.diff(at) / bin_s
    return out


def plot(
    results: Mapping[str, tuple[Run, Series, dict[str, Any]]], out: Path, warm_s: float = 0.0
) -> list[Path]:
    """PNGs: utilisation over time, per-VC usage vs nominal, violation episodes, fair share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    first = next(iter(results.values()))[0]
    vcs = list(first.nominal)
    cap = first.capacity

    fig, ax = plt.subplots(figsize=(10, 4))
    for mode, (_, s, _) in results.items():
        h = usage_hourly(s, vcs).sum(axis=1) / cap
        ax.plot(np.arange(len(h)) / 24.0, 100 * h, label=mode, lw=1)
    if warm_s:
        ax.axvline(warm_s / DAY, color="k", ls=":", lw=0.8, label="end of warm-up")
    ax.set_xlabel("days since stream start")
    ax.set_ylabel("GPUs allocated (% of cluster)")
    ax.set_title("Utilisation over time (hourly means)")
    ax.legend()
    paths.append(out / "utilisation.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    if "lend" in results:
        run, s, summ = results["lend"]
        busiest = sorted(vcs, key=lambda v: -summ["per_vc"][v]["gpu_h"] / run.nominal[v])[:4]
        fig, axes = plt.subplots(len(busiest), 1, figsize=(10, 2.2 * len(busiest)), sharex=True)
        for ax, vc in zip(np.atleast_1d(axes), busiest, strict=True):
            k = vcs.index(vc)
            for mode, (_, sm, _) in results.items():
                if mode == "fair":
                    continue
                h = usage_hourly(sm, vcs)[:, k]
                ax.plot(np.arange(len(h)) / 24.0, h, label=mode, lw=1)
            ax.axhline(run.nominal[vc], color="k", ls="--", lw=0.8, label="nominal")
            ax.set_ylabel(f"{vc}\nGPUs")
        np.atleast_1d(axes)[0].legend(loc="upper right", fontsize=8)
        np.atleast_1d(axes)[-1].set_xlabel("days since stream start")
        fig.suptitle("Per-VC GPUs in use vs nominal quota (hourly means)")
        paths.append(out / "vc_usage.png")
        fig.tight_layout()
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    bound = max(r[2]["reclaim_bound_s"] for r in results.values())
    for mode, (_, _, summ) in results.items():
        for key, what, ls in (
            ("violation_durations_s", "episodes", "-"),
            ("deficit_wait_durations_s", "FIFO GPU waits", ":"),
        ):
            d = np.array(summ[key])
            if d.size:
                bins = np.logspace(0, math.log10(max(d.max(), 10.0)) + 0.1, 40).tolist()
                ax.hist(d, bins=bins, histtype="step", ls=ls, label=f"{mode}: {what} ({d.size})")
    if bound:
        ax.axvline(bound, color="k", ls="--", lw=0.8, label=f"reclaim bound {bound:.0f} s")
    ax.set_xscale("log")
    ax.set_xlabel("duration (s)")
    ax.set_ylabel("count")
    ax.set_yscale("log")
    ax.set_title("Guarantee-violation episodes")
    ax.legend(fontsize=8)
    paths.append(out / "violations.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / (len(results) + 2)
    x = np.arange(len(vcs))
    ref = results.get("fair", next(iter(results.values())))[2]["per_vc"]
    ax.bar(x, [100 * ref[v]["target_simple"] for v in vcs], width, label="target (nominal)")
    ax.bar(x + width, [100 * ref[v]["target_maxmin"] for v in vcs], width, label="target (max-min)")
    for i, (mode, (_, _, summ)) in enumerate(results.items()):
        ax.bar(
            x + (i + 2) * width,
            [100 * summ["per_vc"][v]["share"] for v in vcs],
            width,
            label=f"achieved: {mode}",
        )
    ax.set_xticks(x + width * (len(results) + 1) / 2, vcs, rotation=30)
    ax.set_ylabel("share of GPU-hours (%)")
    ax.set_title("Long-run share per VC: target vs achieved")
    ax.legend(fontsize=8)
    paths.append(out / "fair_share.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


# ----------------------------------------------------------------------------- CLI


def table(summaries: Sequence[dict[str, Any]]) -> str:
    rows: list[tuple[str, Any, str]] = [
        ("GPU utilisation, submission window", "util_window", "{:.1%}"),
        ("GPU utilisation, busy span", "util_busy", "{:.1%}"),
        ("busy span (h)", "busy_span_h", "{:.1f}"),
        ("wait mean / p50 / p95 (h)", ("wait_mean_s", "wait_p50_s", "wait_p95_s"), "h"),
        ("JCT mean / p50 / p95 (h)", ("jct_mean_s", "jct_p50_s", "jct_p95_s"), "h"),
        ("jobs preempted (preemptions)", ("jobs_preempted", "preemptions"), "pp"),
        ("GPU-hours lost to preemption", "lost_gpu_h", "{:.1f}"),
        ("violation episodes", "violation_episodes", "{}"),
        ("longest violation (s)", "violation_max_s", "{:.0f}"),
        ("reclaim bound (s)", "reclaim_bound_s", "{:.0f}"),
        ("episodes over the bound", "violations_over_bound", "{}"),
        ("guaranteed-demand waits (FIFO units)", "deficit_waits", "{}"),
        ("longest guaranteed-demand wait (s)", "deficit_wait_max_s", "{:.0f}"),
        ("p99 guaranteed-demand wait (s)", "deficit_wait_p99_s", "{:.0f}"),
        ("guaranteed-demand waits over the bound", "deficit_waits_over_bound", "{}"),
        (
            "max |share − target| nominal / max-min",
            ("fair_dev_simple_max", "fair_dev_maxmin_max"),
            "pct",
        ),
        ("unfinished jobs", "unfinished", "{}"),
        ("jobs cancelled (preempted > max_preemptions times)", "cancelled", "{}"),
        ("simulation wall time (s)", "sim_wall_s", "{:.1f}"),
    ]
    head = "| metric | " + " | ".join(s["mode"] for s in summaries) + " |"
    lines = [head, "|---" * (len(summaries) + 1) + "|"]
    for label, key, fmt in rows:
        cells = []
        for s in summaries:
            if fmt == "h":
                cells.append(" / ".join(f"{s[k] / 3600:.2f}" for k in key))
            elif fmt == "pp":
                cells.append(f"{s[key[0]]} ({s[key[1]]})")
            elif fmt == "pct":
                cells.append(" / ".join(f"{100 * s[k]:.1f} pp" for k in key))
            else:
                assert isinstance(key, str)
                cells.append(fmt.format(s[key]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def vc_table(summaries: Sequence[dict[str, Any]]) -> str:
    lines = [
        "| VC | nominal | jobs | mode | GPU-h | share | target nominal / max-min "
        "| violation episodes | longest (s) | over bound |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for vc in summaries[0]["per_vc"]:
        for s in summaries:
            v = s["per_vc"][vc]
            lines.append(
                f"| {vc} | {v['nominal']} | {v['jobs']} | {s['mode']} | {v['gpu_h']:.0f} "
                f"| {100 * v['share']:.1f} % | {100 * v['target_simple']:.1f} / "
                f"{100 * v['target_maxmin']:.1f} % | {v['violation_episodes']} "
                f"| {v['violation_max_s']:.0f} | {v['violations_over_bound']} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace-dir", type=Path, default=DEFAULT_TRACE_DIR)
    p.add_argument(
        "--window",
        type=day_window,
        default=None,
        metavar="FROM:TO",
        help="days from the trace's first submission, e.g. 21:35",
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=0.0,
        help="days of jobs before the window that are simulated but not measured",
    )
    p.add_argument("--limit", type=int, default=None, help="at most this many jobs")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument(
        "--gpus-per-vc-node",
        type=float,
        default=1.0,
        help="nominal GPUs per node listed in philly_vc.csv",
    )
    p.add_argument("--bronze-fraction", type=float, default=0.0)
    p.add_argument("--checkpoint-s", type=float, default=1800.0, help="0: none")
    p.add_argument("--half-life-h", type=float, default=24.0)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--victim-order",
        default="checkpoint-aware",
        choices=sorted(VICTIM_ORDERS),
        help="which borrowers a reclaim preempts first",
    )
    p.add_argument(
        "--borrow-backoff-s",
        type=float,
        default=0.0,
        help="a job preempted while borrowing may borrow again only after this long "
        "(doubled each time); 0: no back-off",
    )
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "figures" / "tenancy")
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)

    t0 = time.perf_counter()
    jobs, vcs, dropped = philly_stream(
        args.trace_dir, args.window, args.limit, args.bronze_fraction, args.seed, args.warmup
    )
    if not jobs:
        print("no jobs in the window", file=sys.stderr)
        return 1
    nominal = {vc: round(n * args.gpus_per_vc_node) for vc, n in vcs.items()}
    warm = min(args.warmup, args.window[0]) * DAY if args.window else 0.0
    window_end = (args.window[1] - args.window[0]) * DAY + warm if args.window else jobs[-1].submit
    print(
        f"{len(jobs)} jobs ({dropped} of unlisted VCs dropped), {sum(nominal.values())} GPUs, "
        f"window {window_end / DAY:.1f} d, loaded in {time.perf_counter() - t0:.1f} s"
    )
    results = {}
    for mode in args.modes.split(","):
        run = simulate(
            mode,
            jobs,
            nominal,
            gpus_per_node=args.gpus_per_node,
            checkpoint_s=args.checkpoint_s or None,
            seed=args.seed,
            half_life_s=args.half_life_h * 3600.0,
            victim_order=args.victim_order,
            borrow_backoff_s=args.borrow_backoff_s,
        )
        s = series(run)
        summ = summarize_run(run, s, window_end, warm)
        results[mode] = (run, s, summ)
        print(f"{mode}: simulated in {run.wall_s:.1f} s", flush=True)
    summaries = [r[2] for r in results.values()]
    print(table(summaries))
    print()
    print(vc_table(summaries))
    args.out.mkdir(parents=True, exist_ok=True)
    slim = [{k: v for k, v in s.items() if not k.endswith("durations_s")} for s in summaries]
    meta = {
        "warmup_s": warm,
        "window_end_s": window_end,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "jobs": len(jobs),
        "dropped": dropped,
        "nominal": nominal,
    }
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "modes": slim}, indent=1))
    if not args.no_plots:
        for path in plot(results, args.out, warm):
            print(f"wrote {path}")
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
