"""The failures bench's functions (bench/failures_sim.py) on tiny synthetic runs and streams."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from fusesched.sim.failures import (
    HOUR,
    JobRun,
    RecoveryMode,
    SimNode,
    assess,
    draw_failures,
)

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import failures_sim as fs  # noqa: E402

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces" / "philly"
NODES = [SimNode(f"n{i}", fs.DEVICE_TYPE, 8) for i in range(4)]
# failures frequent enough that a handful of jobs sees several of each kind
MODEL = fs.failure_model(
    1.0, node_mtbf_h=300.0, gpu_mtbf_h=800.0, hang_rate_per_hour=2e-3, max_restarts=3
)
SEEDS = range(6)


def placements() -> list[JobRun]:
    """Twelve jobs of 1–16 GPUs, 3–20 h each, packed on four 8-GPU nodes without overlap."""
    out = []
    t = 0.0
    for k in range(12):
        hours = 3.0 + (k * 7) % 18
        if k % 4 == 3:  # a two-node job
            nodes = (f"n{k % 2 * 2}", f"n{k % 2 * 2 + 1}")
            gpus = tuple((n, i) for n in nodes for i in range(8))
        else:
            nodes = (f"n{k % 4}",)
            gpus = tuple((nodes[0], i) for i in range(1 + k % 8))
        out.append(JobRun(f"j{k}", t, t + hours * HOUR, nodes, gpus))
        t += 21 * HOUR  # one job at a time: no two share a GPU
    return out


def test_recovery_modes_are_ordered_on_every_seed() -> None:
    trial = fs.run_trial(placements(), NODES, MODEL, list(SEEDS), checkpoint_s=1800.0)
    resume, restart, none = (trial.reports[m] for m in fs.MODES)
    assert sum(sum(r.failures.values()) for r in resume) > 10  # the model does bite
    for a, b, c in zip(resume, restart, none, strict=True):
        assert a.gpu_hours_lost <= b.gpu_hours_lost + 1e-9
        assert b.gpu_hours_lost <= c.gpu_hours_lost + 1e-9
        for r in (a, b, c):
            assert r.gpu_hours_allocated == pytest.approx(r.gpu_hours_useful + r.gpu_hours_lost)
            assert r.gpu_hours_lost == pytest.approx(sum(r.lost_by_cause.values()))
    summary = fs.summarize(trial)
    assert summary["auto-resume"]["goodput"]["mean"] >= summary["none"]["goodput"]["mean"]
    text = fs.tables(
        summary,
        fs.sweep(placements(), NODES, [0, 1], intervals_min=[10.0], scales=[1.0]),
    )
    assert "| **GPU-hours lost** |" in text


def test_assess_with_samples_is_assess_plus_the_raw_latencies() -> None:
    runs = fs.job_runs(placements(), 1800.0)
    span = max(r.end for r in runs) + 1.0
    for seed in (0, 3):
        events = draw_failures(NODES, span, MODEL, np.random.default_rng(seed))
        for mode in RecoveryMode:
            report, samples = fs.assess_with_samples(runs, events, NODES, MODEL, mode, seed=seed)
            assert report == assess(runs, events, NODES, MODEL, mode, seed=seed)
            for cause, values in samples.items():
                assert len(values) == report.failures[cause] == report.detection[cause].count
                if values:
                    assert max(values) == report.detection[cause].max_s


def test_shorter_checkpoint_intervals_lose_no_more() -> None:
    sweeps = fs.sweep(
        placements(),
        NODES,
        list(SEEDS),
        intervals_min=[10.0, 30.0, 120.0],
        scales=[],
        hang_rate_per_hour=2e-3,
    )
    lost = [v["mean"] for v in sweeps["checkpoint_interval_min"].values()]
    assert lost[0] <= lost[1] + 1e-9 <= lost[2] + 2e-9


def test_simulate_reads_each_jobs_nodes_and_distinct_gpus() -> None:
    jobs = [
        fs.TraceJob(f"t{i}", 10.0 * i, 3600.0 + 600 * i, g)
        for i, g in enumerate([1, 2, 4, 8, 16, 3])
    ]
    nodes = fs.cluster_nodes(jobs, 100.0, 8, 0.7)
    assert nodes >= 2  # at least the 16-GPU job's two nodes
    schedule = fs.simulate(jobs, 3, 8, window_s=100.0)
    by_id = {p.job_id: p for p in schedule.placements}
    for j in jobs:
        p = by_id[j.id]
        assert len(p.gpus) == j.gpus and p.end - p.start == pytest.approx(j.runtime)
        assert {n for n, _ in p.gpus} == set(p.nodes)
    running = [p for p in schedule.placements if p.start <= 60.0 < p.end]
    held = [g for p in running for g in p.gpus]
    assert len(held) == len(set(held))  # concurrent jobs never share a GPU


@pytest.mark.skipif(
    not SHARED.exists(), reason="../shared/traces/philly (the real trace) is absent"
)
def test_a_philly_window_replays_and_prices() -> None:
    jobs = fs.philly_jobs(SHARED, (28.0, 29.0), 150)
    assert len(jobs) == 150 and all(j.runtime >= 1.0 for j in jobs)
    nodes = fs.cluster_nodes(jobs, fs.DAY, 8, 0.7)
    schedule = fs.simulate(jobs, nodes, 8, window_s=fs.DAY)
    assert len(schedule.placements) == 150
    cluster = fs.sim_nodes(fs.node_specs(nodes, 8), 8)
    trial = fs.run_trial(schedule.placements, cluster, fs.failure_model(0.01), [0, 1])
    fs.check_against_compare(
        schedule.placements, cluster, fs.failure_model(0.01), trial, 0, 0, 1800.0
    )
    for a, b, _ in zip(*(trial.reports[m] for m in fs.MODES), strict=True):
        assert a.gpu_hours_lost <= b.gpu_hours_lost + 1e-9
