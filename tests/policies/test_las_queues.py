"""Tiresias-style discretised 2D-LAS: demotion and promotion rules, table by table."""

from __future__ import annotations

import numpy as np
import pytest

from fusesched.policies.dl_base import RUNNING, WAITING, DlView
from fusesched.policies.las_queues import (
    TiresiasPolicy,
    check_thresholds,
    queue_level,
    should_promote,
)

H = 3600.0


@pytest.mark.parametrize(
    ("service", "thresholds", "level"),
    [
        (0.0, (H,), 0),
        (H - 0.1, (H,), 0),
        (H, (H,), 1),  # reaching the threshold demotes
        (50 * H, (H,), 1),  # the last queue has no floor
        (0.0, (H, 10 * H), 0),
        (5 * H, (H, 10 * H), 1),
        (10 * H, (H, 10 * H), 2),
        (1e9, (0.5 * H, 2 * H, 8 * H), 3),
    ],
)
def test_demotion_by_attained_service(
    service: float, thresholds: tuple[float, ...], level: int
) -> None:
    assert queue_level(service, thresholds) == level


@pytest.mark.parametrize(
    ("waiting_s", "executed_s", "knob", "promote"),
    [
        (0.0, 0.0, 8.0, False),  # never ran: already in the top queue
        (1e6, 0.0, 8.0, False),
        (799.0, 100.0, 8.0, False),
        (800.0, 100.0, 8.0, True),  # waited knob × executed
        (801.0, 100.0, 8.0, True),
        (150.0, 100.0, 2.0, False),
        (200.0, 100.0, 2.0, True),
    ],
)
def test_starvation_promotion(
    waiting_s: float, executed_s: float, knob: float, promote: bool
) -> None:
    assert should_promote(waiting_s, executed_s, knob) is promote


@pytest.mark.parametrize("bad", [(0.0,), (-1.0,), (H, H), (2 * H, H)])
def test_thresholds_must_be_positive_and_increasing(bad: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="positive and increasing"):
        check_thresholds(bad)


def test_negative_service_is_an_error() -> None:
    with pytest.raises(ValueError):
        queue_level(-1.0, (H,))


def view(
    submit: list[float],
    attained: list[float],
    executed: list[float],
    wait_since: list[float],
    state: list[int],
    gpus: list[int] | None = None,
) -> DlView:
    n = len(submit)
    return DlView(
        submit=np.array(submit, dtype=np.float64),
        gpus=np.array(gpus or [1] * n, dtype=np.int64),
        state=np.array(state, dtype=np.int8),
        attained=np.array(attained, dtype=np.float64),
        executed=np.array(executed, dtype=np.float64),
        wait_since=np.array(wait_since, dtype=np.float64),
        runs=np.array([1 if e > 0 else 0 for e in executed], dtype=np.int64),
        group=np.zeros(n, dtype=np.int64),
        total_gpus=8,
    )


def test_higher_queue_first_then_fifo_within_a_queue() -> None:
    # job 0: oldest, demoted (2 GPU-hours); job 1 and 2: in Q0, 2 arrived before 1
    v = view(
        submit=[0.0, 20.0, 10.0],
        attained=[2 * H, 0.0, 100.0],
        executed=[2 * H, 0.0, 100.0],
        wait_since=[7200.0, 20.0, 10.0],
        state=[RUNNING, WAITING, RUNNING],
    )
    policy = TiresiasPolicy(thresholds=(H,), promote_knob=8.0)
    order = policy.order(7300.0, v, np.array([0, 1, 2]))
    assert order.tolist() == [2, 1, 0]
    assert policy.levels(v, np.array([0, 1, 2])).tolist() == [1, 0, 0]


def test_a_starving_job_is_promoted_to_the_top_queue_and_its_count_restarts() -> None:
    # job 0 ran 1 h (1 GPU-hour: queue 1), then waited; job 1 is newer, in Q0
    v = view(
        submit=[0.0, 100.0],
        attained=[H, 60.0],
        executed=[H, 60.0],
        wait_since=[H, 100.0],
        state=[WAITING, RUNNING],
    )
    policy = TiresiasPolicy(thresholds=(H,), promote_knob=2.0)
    # waited 1.5 h < 2 × 1 h: not yet promoted, stays below job 1
    assert policy.order(H + 1.5 * H, v, np.array([0, 1])).tolist() == [1, 0]
    assert policy.promotions == 0
    # waited 2 h: promoted to Q0, where it is the older job
    assert policy.order(H + 2 * H, v, np.array([0, 1])).tolist() == [0, 1]
    assert policy.promotions == 1
    assert policy.levels(v, np.array([0])).tolist() == [0]
    # its service is counted again from the promotion: one more GPU-hour demotes it again
    v.attained[0] = 2 * H
    assert policy.levels(v, np.array([0])).tolist() == [1]
