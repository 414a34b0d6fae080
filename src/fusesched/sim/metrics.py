"""Scheduling metrics: wait, response, bounded slowdown, utilisation, makespan, per queue;
energy and its wait cost for simulations with a power hook."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from fusesched.sim.engine import JobOutcome, SimResult

BSLD_THRESHOLD_S = 10.0


@dataclass(frozen=True, slots=True)
class Metrics:
    jobs: int
    rejected: int
    avg_wait_s: float
    p95_wait_s: float
    avg_response_s: float
    avg_bounded_slowdown: float
    utilization: float
    makespan_s: float
    backfilled: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def bounded_slowdown(wait: np.ndarray, run: np.ndarray) -> np.ndarray:
    """max(1, (wait + run) / max(run, 10 s)) per job."""
    out: np.ndarray = np.maximum(1.0, (wait + run) / np.maximum(run, BSLD_THRESHOLD_S))
    return out


def summarize(outcomes: Sequence[JobOutcome], total_cpus: float) -> Metrics:
    """Metrics over the jobs that ran; utilisation is CPU-seconds used over CPU-seconds offered
    between the first submit and the last end."""
    ran = [o for o in outcomes if not o.rejected and o.start == o.start]
    rejected = sum(1 for o in outcomes if o.rejected)
    if not ran:
        return Metrics(0, rejected, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    submit = np.array([o.submit for o in ran])
    start = np.array([o.start for o in ran])
    end = np.array([o.end for o in ran])
    run = end - start
    cpus = np.array([o.cpus for o in ran])
    wait = start - submit
    makespan = float(end.max() - submit.min())
    used = float((run * cpus).sum())
    return Metrics(
        jobs=len(ran),
        rejected=rejected,
        avg_wait_s=float(wait.mean()),
        p95_wait_s=float(np.percentile(wait, 95)),
        avg_response_s=float((end - submit).mean()),
        avg_bounded_slowdown=float(bounded_slowdown(wait, run).mean()),
        utilization=used / (makespan * total_cpus) if makespan > 0 and total_cpus > 0 else 0.0,
        makespan_s=makespan,
        backfilled=sum(1 for o in ran if o.backfilled),
    )


def per_queue(outcomes: Sequence[JobOutcome], total_cpus: float) -> dict[str, Metrics]:
    """The same metrics per queue (utilisation relative to the whole cluster)."""
    queues: dict[str, list[JobOutcome]] = {}
    for o in outcomes:
        queues.setdefault(o.queue, []).append(o)
    return {name: summarize(items, total_cpus) for name, items in sorted(queues.items())}


@dataclass(frozen=True, slots=True)
class EnergyMetrics:
    """Energy of a simulation with a power hook, and the waits it cost."""

    kwh: float
    kwh_per_month: float  # scaled to a 30-day month over the metering window
    mean_power_kw: float
    avg_wait_s: float
    p95_wait_s: float
    jobs: int  # jobs whose wait is counted
    suspends: int
    resumes: int

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def energy_summary(
    result: SimResult, submitted: tuple[float, float] | None = None
) -> EnergyMetrics:
    """kWh and waits of ``result`` (which must come from a simulation with a power hook);
    waits of the jobs submitted within ``submitted`` (all jobs that ran when None)."""
    report = result.power
    if report is None:
        raise ValueError("the simulation had no power hook: no energy to report")
    lo, hi = submitted if submitted is not None else (-np.inf, np.inf)
    wait = np.array(
        [
            o.start - o.submit
            for o in result.outcomes
            if not o.rejected and o.start == o.start and lo <= o.submit < hi
        ]
    )
    return EnergyMetrics(
        kwh=report.energy_kwh,
        kwh_per_month=report.kwh_per_month,
        mean_power_kw=report.mean_power_kw,
        avg_wait_s=float(wait.mean()) if wait.size else 0.0,
        p95_wait_s=float(np.percentile(wait, 95)) if wait.size else 0.0,
        jobs=int(wait.size),
        suspends=report.suspends,
        resumes=report.resumes,
    )
