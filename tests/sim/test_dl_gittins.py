"""The online Gittins policy: Kaplan-Meier survival, the index table, ordering."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fusesched.policies.dl_base import RUNNING, WAITING, DlView
from fusesched.policies.dl_gittins import (
    GittinsPolicy,
    gittins_table,
    gpu_bucket,
    kaplan_meier,
)

GRID = np.array([0.0, 50.0, 100.0, 150.0, 200.0, 300.0, 1000.0])


def test_kaplan_meier_without_censoring_is_the_empirical_survival() -> None:
    surv = kaplan_meier(np.array([100.0, 200.0, 200.0, 1000.0]), np.array([]), GRID)
    assert surv.tolist() == pytest.approx([1.0, 1.0, 0.75, 0.75, 0.25, 0.25, 0.0])


def test_kaplan_meier_with_censored_jobs() -> None:
    # completions at 100 and 300; one job still running at 150 (needs more than 150)
    surv = kaplan_meier(np.array([100.0, 300.0]), np.array([150.0]), GRID)
    # S(100) = 1 - 1/3; at 300 one of the one at risk finishes: 0
    assert surv.tolist() == pytest.approx([1.0, 1.0, 2 / 3, 2 / 3, 2 / 3, 0.0, 0.0])
    # no data: everything survives
    assert kaplan_meier(np.array([]), np.array([]), GRID).tolist() == [1.0] * len(GRID)


def test_the_index_rises_with_service_for_a_fixed_size_and_falls_for_a_heavy_tail() -> None:
    grid = np.linspace(0.0, 1000.0, 101)
    fixed = gittins_table(grid, (grid < 500.0).astype(np.float64))  # every job needs 500
    # (the trapezoid rule puts the step half a grid cell early: 1 %, 5 % error here)
    assert fixed[0] == pytest.approx(1 / 500, rel=0.02)
    assert fixed[40] == pytest.approx(1 / 100, rel=0.06)  # 400 done: 100 to go
    assert fixed[0] < fixed[20] < fixed[40]
    assert fixed[60] == 0.0  # beyond every known size
    # half the jobs need 100, half 900: a fresh job is worth more than one past 100
    two = np.where(grid < 100.0, 1.0, np.where(grid < 900.0, 0.5, 0.0))
    table = gittins_table(grid, two)
    assert table[0] > table[20]  # 0.5 / 100 against 1 / 700 at 200 done
    assert table[0] == pytest.approx(0.5 / 100, rel=0.03)
    assert table[20] == pytest.approx(1 / 700, rel=0.01)


def view(attained: list[float], state: list[int], gpus: list[int]) -> DlView:
    n = len(attained)
    return DlView(
        submit=np.arange(n, dtype=np.float64),
        gpus=np.array(gpus, dtype=np.int64),
        state=np.array(state, dtype=np.int8),
        attained=np.array(attained, dtype=np.float64),
        executed=np.array(attained, dtype=np.float64),
        wait_since=np.zeros(n),
        runs=np.zeros(n, dtype=np.int64),
        group=np.zeros(n, dtype=np.int64),
        total_gpus=8,
    )


def test_cold_start_is_las_then_the_learned_index_orders() -> None:
    policy = GittinsPolicy(min_samples=3, min_class_samples=100)
    v = view([500.0, 0.0, 250.0], [RUNNING, WAITING, RUNNING], [1, 1, 1])
    active = np.array([0, 1, 2])
    assert policy.order(0.0, v, active).tolist() == [1, 2, 0]  # least attained first
    # every job seen so far needed exactly 600 GPU-seconds: the nearly done job goes first
    done = view([600.0] * 3, [3, 3, 3], [1, 1, 1])
    for job in range(3):
        policy.finished(0.0, done, job)
    assert policy.order(0.0, v, active).tolist() == [0, 2, 1]
    assert policy.refits == 1


def test_gpu_classes() -> None:
    assert gpu_bucket(np.array([1, 2, 4, 5, 8, 9, 64])).tolist() == [0, 1, 1, 2, 2, 3, 3]


@pytest.mark.parametrize(
    "kwargs", [{"keep_factor": 0.5}, {"min_samples": 0}, {"refit_fraction": 1.0}]
)
def test_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        GittinsPolicy(**kwargs)  # type: ignore[arg-type]


def _burst_view(submit: list[float], gpus: list[int], attained: list[float]) -> DlView:
    waiting = [WAITING] * len(submit)
    return replace(view(attained, waiting, gpus), submit=np.array(submit, dtype=np.float64))


def test_bursts_chain_submissions_of_one_gpu_count_within_the_gap() -> None:
    policy = GittinsPolicy(siblings=True, burst_gap_s=60.0)
    # 0,1,2 chained (gaps 50, 50); 3 is 2 GPUs; 4 comes 61 s after 3; 5 joins 4
    v = _burst_view([0, 50, 100, 110, 171, 200], [1, 1, 1, 2, 2, 2], [0.0] * 6)
    policy._assign_bursts(v, 5)
    assert policy._burst.tolist() == [0, 0, 0, 1, 2, 2]
    # the same submissions to two virtual clusters: a change of VC starts a new burst
    other = GittinsPolicy(siblings=True, burst_gap_s=60.0)
    split = replace(v, group=np.array([0, 0, 1, 1, 1, 1], dtype=np.int64))
    other._assign_bursts(split, 5)
    assert other._burst.tolist() == [0, 0, 1, 2, 3, 3]


def test_finished_siblings_make_a_job_one_of_their_size() -> None:
    policy = GittinsPolicy(siblings=True, min_samples=1, min_class_samples=100)
    # jobs 0-2 are one burst, jobs 3 and 4 are alone; job 0 finished after 100 GPU-s
    v = _burst_view([0, 10, 20, 500, 900], [1, 1, 1, 1, 1], [100.0, 30.0, 0.0, 10.0, 0.0])
    policy.finished(0.0, v, 0)
    active = np.array([1, 2, 3, 4])
    idx = policy._sibling_index(v, active, np.full(4, 1e-4))
    # siblings of a 100 GPU-s job: 70 and 100 left, floored at one restart (60 s × 1 GPU)
    assert idx.tolist() == pytest.approx([1 / 70, 1 / 100, 1e-4, 1e-4])
    beyond = _burst_view([0, 10, 20, 500, 900], [1, 1, 1, 1, 1], [100.0, 150.0, 95.0, 0, 0])
    idx = policy._sibling_index(beyond, active, np.full(4, 1e-4))
    assert idx.tolist() == pytest.approx([1e-4, 1 / 60, 1e-4, 1e-4])  # 150 > 100: class index
    # in the order, the sibling with the least predicted service left goes first
    assert policy.order(0.0, v, active).tolist()[0] == 1
