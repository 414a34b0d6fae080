"""The failure model: determinism, counts against MTBF, and goodput lost per recovery mode."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.sim.failures import (
    HOUR,
    FailureEvent,
    FailureModel,
    FailureType,
    JobRun,
    RecoveryMode,
    Reliability,
    SimNode,
    assess,
    compare,
    draw_failures,
    expected_failures,
    outage_timeline,
)

GPU_NODE = Reliability(node_mtbf_h=2000.0, gpu_mtbf_h=5000.0, node_repair_h=4.0)
CPU_NODE = Reliability(node_mtbf_h=8000.0)
MODEL = FailureModel({"h200": GPU_NODE, "cpu": CPU_NODE})


def cluster(gpu_nodes: int = 64, cpu_nodes: int = 32) -> list[SimNode]:
    return [SimNode(f"g{i:03d}", "h200", 8) for i in range(gpu_nodes)] + [
        SimNode(f"c{i:03d}", "cpu") for i in range(cpu_nodes)
    ]


def test_same_seed_same_failures() -> None:
    nodes = cluster()
    span = 90 * 24 * HOUR
    a = draw_failures(nodes, span, MODEL, np.random.default_rng(7))
    b = draw_failures(nodes, span, MODEL, np.random.default_rng(7))
    c = draw_failures(nodes, span, MODEL, np.random.default_rng(8))
    assert a == b and a != c and len(a) > 0
    times = [e.time for e in a]
    assert times == sorted(times) and all(0 <= t < span for t in times)
    assert all(e.gpu is not None and e.node.startswith("g") for e in a if e.type is FailureType.GPU)
    node_failure = next(e for e in a if e.type is FailureType.NODE)
    assert node_failure.repaired_at == pytest.approx(node_failure.time + 4 * HOUR)


def test_counts_match_mtbf() -> None:
    nodes = cluster(256, 256)
    span = 365 * 24 * HOUR
    events = draw_failures(nodes, span, MODEL, np.random.default_rng(1))
    expect_node, expect_gpu = expected_failures(nodes, span, MODEL)
    assert expect_node == pytest.approx(256 * span / (2000 * HOUR) + 256 * span / (8000 * HOUR))
    got_node = sum(e.type is FailureType.NODE for e in events)
    got_gpu = sum(e.type is FailureType.GPU for e in events)
    for got, expected in ((got_node, expect_node), (got_gpu, expect_gpu)):
        assert abs(got - expected) < 5 * math.sqrt(expected)  # Poisson: 5 standard deviations
    cpu_failures = sum(e.node.startswith("c") for e in events)
    assert abs(cpu_failures - 256 * span / (8000 * HOUR)) < 5 * math.sqrt(256 * 365 * 24 / 8000)


def test_never_failing_devices_and_unknown_types() -> None:
    model = FailureModel({"x": Reliability()})
    assert draw_failures([SimNode("a", "x", 8)], 1e9, model, np.random.default_rng(0)) == ()
    assert draw_failures([], 1e9, model, np.random.default_rng(0)) == ()
    with pytest.raises(ValueError, match="no reliability"):
        draw_failures([SimNode("a", "y")], 1.0, model, np.random.default_rng(0))
    with pytest.raises(ValueError):
        Reliability(node_mtbf_h=0)


def test_outage_timeline() -> None:
    events = (
        FailureEvent(10.0, FailureType.NODE, "a", None, 50.0),
        FailureEvent(20.0, FailureType.GPU, "b", 3, 30.0),
    )
    assert outage_timeline(events) == [
        (10.0, "a", None, False),
        (20.0, "b", 3, False),
        (30.0, "b", 3, True),
        (50.0, "a", None, True),
    ]


# --- goodput ---------------------------------------------------------------------------------

ONE_NODE = [SimNode("n0", "safe", 8)]
SAFE = FailureModel(
    {"safe": Reliability()},
    node_detect_s=30.0,
    detect_jitter_s=0.0,
    restart_overhead_s=300.0,
    manual_resubmit_s=4 * HOUR,
)
TEN_HOURS = JobRun(
    "j1",
    0.0,
    10 * HOUR,
    ("n0",),
    tuple(("n0", i) for i in range(8)),
    checkpoint_interval_s=HOUR,
    walltime_s=12 * HOUR,
)
CRASH = (FailureEvent(5.5 * HOUR, FailureType.NODE, "n0", None, 6 * HOUR),)


def test_no_failures_no_loss() -> None:
    report = assess([TEN_HOURS], (), ONE_NODE, SAFE, RecoveryMode.AUTO_RESUME)
    assert report.gpu_hours_lost == 0 and report.goodput == 1.0 and report.completed == 1
    assert report.gpu_hours_useful == pytest.approx(80.0) and report.delay_hours == 0


def test_one_node_crash_by_hand() -> None:
    reports = compare([TEN_HOURS], CRASH, ONE_NODE, SAFE)
    resume, restart, none = (reports[m] for m in RecoveryMode)
    # resume: 0.5 h since the 5 h checkpoint + 30 s detection + 300 s restart, on 8 GPUs
    assert resume.gpu_hours_lost == pytest.approx(8 * (0.5 * HOUR + 330) / HOUR)
    assert resume.delay_hours == pytest.approx((0.5 * HOUR + 330) / HOUR)
    # restart from zero: all 5.5 h lost
    assert restart.gpu_hours_lost == pytest.approx(8 * (5.5 * HOUR + 330) / HOUR)
    # no automation: the same GPU-hours, and a person resubmits 4 h later
    assert none.gpu_hours_lost == pytest.approx(restart.gpu_hours_lost)
    assert none.delay_hours == pytest.approx(restart.delay_hours + 4)
    for report in reports.values():
        assert report.failures[FailureType.NODE] == 1 and report.restarts == 1
        assert report.lost_by_cause[FailureType.NODE] == pytest.approx(report.gpu_hours_lost)
        assert report.gpu_hours_allocated == pytest.approx(
            report.gpu_hours_useful + report.gpu_hours_lost
        )
        assert report.detection[FailureType.NODE].mean_s == 30.0
    assert resume.goodput > restart.goodput


def test_failures_elsewhere_or_later_do_not_count() -> None:
    other = (
        FailureEvent(1.0 * HOUR, FailureType.NODE, "n1", None),
        FailureEvent(11.0 * HOUR, FailureType.NODE, "n0", None),
        FailureEvent(2.0 * HOUR, FailureType.GPU, "n1", 0),
    )
    nodes = [*ONE_NODE, SimNode("n1", "safe", 8)]
    report = assess([TEN_HOURS], other, nodes, SAFE, RecoveryMode.AUTO_RESUME)
    assert report.gpu_hours_lost == 0
    gpu = (FailureEvent(2.0 * HOUR, FailureType.GPU, "n0", 5),)
    hit = assess([TEN_HOURS], gpu, nodes, SAFE, RecoveryMode.AUTO_RESUME)
    assert hit.failures[FailureType.GPU] == 1
    assert hit.detection[FailureType.GPU].mean_s == SAFE.gpu_detect_s


def test_hangs_wait_for_the_walltime_without_detection() -> None:
    model = FailureModel({"safe": Reliability()}, hang_rate_per_hour=0.02, detect_jitter_s=0)
    runs = [
        JobRun(f"j{i}", 0.0, 10 * HOUR, ("n0",), (("n0", 0),), HOUR, 12 * HOUR) for i in range(300)
    ]
    reports = compare(runs, (), ONE_NODE, model, seed=3)
    none, resume = reports[RecoveryMode.NONE], reports[RecoveryMode.AUTO_RESUME]
    assert none.failures[FailureType.HANG] > 10
    assert none.detection[FailureType.HANG].max_s <= 12 * HOUR
    assert resume.detection[FailureType.HANG].mean_s == model.hang_detect_s
    assert none.lost_by_cause[FailureType.HANG] > 2 * resume.lost_by_cause[FailureType.HANG]
    assert resume.goodput > reports[RecoveryMode.AUTO_RESTART].goodput > none.goodput


def test_budget_exhausted_abandons_the_job() -> None:
    model = FailureModel({"safe": Reliability()}, hang_rate_per_hour=50.0, max_restarts=2)
    run = JobRun("j", 0.0, 10 * HOUR, ("n0",), (("n0", 0),), HOUR, None)
    report = assess([run], (), ONE_NODE, model, RecoveryMode.AUTO_RESUME)
    assert report.abandoned == 1 and report.completed == 0 and report.restarts == 2
    assert report.gpu_hours_useful == 0
    assert report.gpu_hours_lost == pytest.approx(report.gpu_hours_allocated)


def test_unknown_node_in_a_run() -> None:
    with pytest.raises(ValueError, match="unknown node"):
        assess([JobRun("j", 0, 1, ("zz",))], (), ONE_NODE, SAFE, RecoveryMode.NONE)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.floats(50, 5000),
    st.floats(0, 0.05),
    st.sampled_from(list(RecoveryMode)),
    st.sampled_from([None, 600.0, 3600.0]),
)
def test_hours_add_up_and_runs_are_deterministic(
    seed: int, mtbf: float, hang_rate: float, mode: RecoveryMode, ckpt: float | None
) -> None:
    nodes = [SimNode(f"n{i}", "g", 4) for i in range(8)]
    model = FailureModel(
        {"g": Reliability(node_mtbf_h=mtbf, gpu_mtbf_h=mtbf)}, hang_rate_per_hour=hang_rate
    )
    rng = np.random.default_rng(seed)
    span = 30 * 24 * HOUR
    events = draw_failures(nodes, span, model, rng)
    runs = []
    for i in range(20):
        start = float(rng.uniform(0, span / 2))
        node = f"n{i % 8}"
        length = float(rng.uniform(0.5, 48)) * HOUR
        runs.append(
            JobRun(f"j{i}", start, start + length, (node,), ((node, 0), (node, 1)), ckpt, None)
        )
    report = assess(runs, events, nodes, model, mode, seed=seed)
    assert report == assess(runs, events, nodes, model, mode, seed=seed)
    assert report.gpu_hours_allocated == pytest.approx(
        report.gpu_hours_useful + report.gpu_hours_lost, rel=1e-9, abs=1e-6
    )
    assert report.gpu_hours_lost >= -1e-9
    assert report.completed + report.abandoned == len(runs)
    assert sum(report.lost_by_cause.values()) == pytest.approx(report.gpu_hours_lost)
