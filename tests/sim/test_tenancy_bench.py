"""The tenancy bench's functions (bench/tenancy_philly.py) on a tiny synthetic stream."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fusesched.model.job import QoS

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import tenancy_philly as tp  # noqa: E402

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces" / "philly"
NOMINAL = {"a": 8, "b": 8}  # two VCs, one node of 8 GPUs each


def stream(stagger: float = 0.0) -> list[tp.TraceJob]:
    """VC ``a`` is overloaded from the start; VC ``b`` is idle, then wants its quota back."""
    jobs = [tp.TraceJob(f"a{i}", "a", float(i), 2000.0, 4) for i in range(8)]
    jobs += [tp.TraceJob(f"b{i}", "b", 1000.0 + stagger * i, 500.0, 4) for i in range(2)]
    jobs.append(tp.TraceJob("b2", "b", 3000.0, 300.0, 4, QoS.SILVER))
    return sorted(jobs, key=lambda j: j.submit)


def run(mode: str, stagger: float = 0.0) -> tuple[tp.Run, tp.Series, dict[str, object]]:
    r = tp.simulate(mode, stream(stagger), NOMINAL, gpus_per_node=8, checkpoint_s=600.0)
    s = tp.series(r)
    return r, s, tp.summarize_run(r, s, window_end=4000.0)


def test_lending_raises_utilisation_and_reclaims_within_the_bound() -> None:
    _, _, none = run("none")
    lend_run, _, lend = run("lend")
    assert lend["util_window"] >= none["util_window"]  # type: ignore[operator]
    assert lend["util_window"] > none["util_window"]  # type: ignore[operator]  # b idle at first
    assert lend["preemptions"]  # b reclaimed what a borrowed
    bound = tp.reclaim_bound(lend_run)
    assert bound == pytest.approx(120.0)  # silver's grace; the cycle runs at the victim's exit
    assert lend["violation_max_s"] <= bound + 1e-6  # type: ignore[operator]
    assert lend["violations_over_bound"] == 0
    assert lend["deficit_wait_max_s"] <= bound + 1e-6  # type: ignore[operator]
    assert none["violation_episodes"] == 0  # without lending b's quota is always free
    for _, _, summary in (run("none"), (None, None, lend)):
        assert summary["unfinished"] == 0


def test_staggered_claims_chain_episodes_but_each_claim_is_served_in_time() -> None:
    """b's second job arrives 10 s into the first reclaim: the VC-level episode lasts 130 s,
    but every GPU of guaranteed demand waits only the 120 s grace (the FIFO deficit wait)."""
    r, _, lend = run("lend", stagger=10.0)
    bound = tp.reclaim_bound(r)
    assert lend["violation_max_s"] == pytest.approx(bound + 10.0)
    assert lend["deficit_wait_max_s"] == pytest.approx(bound)


def test_violation_episodes_and_water_fill() -> None:
    import numpy as np

    times = np.array([0.0, 1.0, 3.0, 4.0, 9.0])
    flag = np.array([False, True, True, False, True])
    assert tp.episodes(times, flag) == [(1.0, 4.0), (9.0, 9.0)]
    fill = tp.water_fill(10.0, np.array([1.0, 1.0, 2.0]), np.array([1.0, 100.0, 100.0]))
    assert fill.tolist() == pytest.approx([1.0, 3.0, 6.0])
    waits = tp.deficit_latencies(np.array([0.0, 10.0, 15.0, 20.0]), np.array([4, 8, 4, 0]))
    assert waits == pytest.approx([15.0, 10.0])


@pytest.mark.skipif(not (SHARED / "philly.csv").exists(), reason="needs ../shared/traces/philly")
def test_philly_stream_window() -> None:
    jobs, vcs, dropped = tp.philly_stream(SHARED, (21.0, 21.5), 200, 0.0, 0)
    assert 0 < len(jobs) <= 200 and len(vcs) == 11 and dropped >= 0
    assert all(j.vc in vcs and 0 <= j.submit < 0.5 * tp.DAY for j in jobs)
