"""The DL protocol runner: checkpoint-boundary preemption, restart cost, locality, FIFO order,
no duration look-ahead, determinism."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fusesched.policies.dl_base import DlView
from fusesched.policies.dl_registry import DL_POLICIES, DlPolicyError, make_dl_policy
from fusesched.sim.dl.model import DlCluster, DlJob
from fusesched.sim.dl.placement import place
from fusesched.sim.dl.runner import run_dl
from fusesched.sim.dl.workloads import offered_gpus, sized_cluster

PLAIN = [p for p in DL_POLICIES if p != "sjf-oracle"]


def jobs_of(*rows: tuple[float, float, int]) -> list[DlJob]:
    """(submit, duration, gpus) rows → jobs j0, j1, …"""
    return [DlJob(f"j{i}", s, d, g) for i, (s, d, g) in enumerate(rows)]


def run(name: str, jobs: list[DlJob], cluster: DlCluster):  # type: ignore[no-untyped-def]
    durations = np.array([j.duration_s for j in jobs])
    return run_dl(jobs, cluster, make_dl_policy(name, durations), record=True)


def random_jobs(seed: int, n: int = 60, span: float = 4000.0) -> list[DlJob]:
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(0, span, n))
    duration = np.round(rng.lognormal(6.0, 1.3, n))
    gpus = rng.choice([1, 1, 1, 2, 4, 8], n)
    return [
        DlJob(f"r{i}", float(s), float(d), int(g))
        for i, (s, d, g) in enumerate(zip(submit, duration, gpus, strict=True))
    ]


# ----------------------------------------------------------------------------- preemption


def test_preemption_waits_for_the_checkpoint_and_the_resume_pays_the_restart() -> None:
    cluster = DlCluster(nodes=1, gpus_per_node=1, checkpoint_s=100.0, restart_s=10.0)
    jobs = jobs_of((0.0, 1000.0, 1), (30.0, 50.0, 1))
    result = run("las", jobs, cluster)
    events = [(t, what, job) for t, what, job, _ in result.log]
    # job 1 arrives with less service: job 0 is marked at once but runs to its checkpoint
    assert (30.0, "mark", 0) in events
    assert (100.0, "stop", 0) in events
    assert (100.0, "start", 1) in events
    # job 0 resumes at 150, holds its GPU 10 s without progress, then needs 900 s more
    assert result.finish.tolist() == [1060.0, 150.0]
    assert result.preemptions.tolist() == [1, 0]
    assert result.restart_gpu_s == 10.0


def test_a_job_that_would_finish_before_its_checkpoint_is_not_preempted() -> None:
    cluster = DlCluster(nodes=1, gpus_per_node=1, checkpoint_s=100.0, restart_s=10.0)
    jobs = jobs_of((0.0, 90.0, 1), (30.0, 50.0, 1))
    result = run("las", jobs, cluster)
    assert result.preemptions.tolist() == [0, 0]
    assert result.finish.tolist() == [90.0, 140.0]


@pytest.mark.parametrize("name", ["sjf-oracle", "las", "tiresias-2q", "tiresias", "gittins"])
@pytest.mark.parametrize("seed", [1, 2])
def test_stops_happen_only_at_checkpoints_and_no_work_is_lost(name: str, seed: int) -> None:
    cluster = DlCluster(nodes=2, gpus_per_node=8, checkpoint_s=120.0, restart_s=30.0)
    jobs = random_jobs(seed)
    result = run(name, jobs, cluster)
    stops = [progress for _, what, _, progress in result.log if what == "stop"]
    assert stops, "the workload should cause preemptions"
    assert all(p > 0 and abs(p / 120.0 - round(p / 120.0)) < 1e-6 for p in stops)
    # every GPU-second held was useful work (at the job's speed) or restart overhead
    spread = DlCluster(nodes=1, gpus_per_node=16, checkpoint_s=120.0, restart_s=30.0)
    one_node = run(name, jobs, spread)  # one 16-GPU node: nothing is ever spread
    work = sum(j.duration_s * j.gpus for j in jobs)
    assert one_node.busy_gpu_s == pytest.approx(work + one_node.restart_gpu_s)
    assert one_node.restart_gpu_s <= 30.0 * sum(j.gpus for j in jobs) * one_node.preemptions.max()
    assert result.restart_gpu_s > 0


def test_fifo_is_strict_and_never_preempts() -> None:
    cluster = DlCluster(nodes=1, gpus_per_node=8)
    jobs = jobs_of((0.0, 1000.0, 8), (10.0, 100.0, 8), (20.0, 5.0, 1))
    result = run("fifo", jobs, cluster)
    # the 1-GPU job does not overtake the blocked 8-GPU job
    assert result.finish.tolist() == [1000.0, 1100.0, 1105.0]
    assert result.preemptions.sum() == 0


def test_sjf_oracle_runs_the_shortest_remaining_work_first() -> None:
    cluster = DlCluster(nodes=1, gpus_per_node=1, checkpoint_s=50.0, restart_s=0.0)
    jobs = jobs_of((0.0, 500.0, 1), (0.0, 100.0, 1), (0.0, 300.0, 1))
    result = run("sjf-oracle", jobs, cluster)
    assert result.finish.tolist() == [900.0, 100.0, 400.0]


# ----------------------------------------------------------------------------- locality


def test_placement_prefers_best_fit_and_few_nodes() -> None:
    free = np.array([8, 3, 5, 8])
    assert place(free, 3, 8) == ([(1, 3)], True)  # fullest node that fits
    assert place(free, 8, 8) == ([(0, 8)], True)
    assert place(free, 16, 8) == ([(0, 8), (3, 8)], True)
    assert place(free, 12, 8) == ([(0, 8), (3, 4)], True)
    # 6 GPUs fit no single node once the full ones are taken: spread
    assert place(np.array([3, 5, 2]), 6, 8) == ([(1, 5), (0, 1)], False)
    assert place(np.array([3, 5, 2]), 11, 8) is None


def test_a_spread_job_runs_slower() -> None:
    cluster = DlCluster(nodes=2, gpus_per_node=4, spread_speed=0.5)
    jobs = jobs_of((0.0, 100.0, 3), (0.0, 100.0, 3), (1.0, 100.0, 2))
    result = run("fifo", jobs, cluster)
    assert result.spread_starts == 1
    assert result.finish.tolist() == [100.0, 100.0, 201.0]  # 1+1 GPUs on two nodes: half speed


def _spread_case(*extra: tuple[float, float, int]) -> list[DlJob]:
    # j0, j1 take 3 of 4 GPUs on each node; j2 (2 GPUs) gets one on each: spread, half speed
    return jobs_of((0.0, 150.0, 3), (0.0, 1000.0, 3), (1.0, 1000.0, 2), *extra)


SPREAD_CLUSTER = DlCluster(nodes=2, gpus_per_node=4, spread_speed=0.5, checkpoint_s=100.0)


@pytest.mark.parametrize("name", ["gittins", "tiresias-mig"])
def test_a_spread_job_moves_to_a_consolidated_placement_at_its_checkpoint(name: str) -> None:
    cluster = dataclasses.replace(SPREAD_CLUSTER, restart_s=10.0)
    result = run(name, _spread_case(), cluster)
    events = [(t, what, job) for t, what, job, _ in result.log]
    # j0 ends at 150: node 0 now has room for j2; j2 is at 74.5 s of progress, so it moves at
    # its checkpoint (100 s of progress, t = 1 + 100 / 0.5 = 201), restarts for 10 s and does
    # the other 900 s at full speed
    assert (150.0, "plan-move", 2) in events
    assert (201.0, "move", 2) in events
    assert result.finish.tolist() == [150.0, 1000.0, 1111.0]
    assert result.migrations == 1 and result.preemptions.sum() == 0
    assert result.restart_gpu_s == 20.0
    # without re-consolidation (every baseline) it stays spread: 1 + 1000 / 0.5
    assert run("tiresias", _spread_case(), cluster).finish[2] == 2001.0
    assert run("fifo", _spread_case(), cluster).migrations == 0


def test_a_move_is_cancelled_when_the_place_is_taken_before_the_checkpoint() -> None:
    # j3 (3 GPUs) arrives at 160 and takes node 0's free GPUs before j2's checkpoint at 201
    result = run("gittins", _spread_case((160.0, 500.0, 3)), SPREAD_CLUSTER)
    events = [(t, what, job) for t, what, job, _ in result.log]
    assert (150.0, "plan-move", 2) in events
    assert (201.0, "move-cancelled", 2) in events  # no restart paid, still spread
    # j3 ends at 660 (progress of j2: 329.5 s): j2 moves at its next checkpoint, 400 s at
    # t = 801, restarts for 60 s and does the last 600 s at full speed
    assert (660.0, "plan-move", 2) in events and (801.0, "move", 2) in events
    assert result.migrations == 1
    assert result.finish[2] == 1461.0


# ----------------------------------------------------------------------------- look-ahead


def test_the_policy_view_has_no_duration() -> None:
    names = {f.name for f in dataclasses.fields(DlView)}
    assert not any("dur" in n or "remain" in n or "finish" in n for n in names)


def _before(log: list[tuple[float, str, int, float]], horizon: float) -> list[object]:
    return [entry for entry in log if entry[0] < horizon]


@pytest.mark.parametrize("name", [*PLAIN, "sjf-oracle"])
def test_no_policy_but_the_oracle_reads_durations(name: str) -> None:
    """Two workloads differ only in a long job's duration; every decision taken before that
    job could first finish must be the same — except for sjf-oracle, which reads durations
    (so the test can tell)."""
    base = random_jobs(7, n=80, span=3000.0)
    horizon = 5000.0
    long_a = DlJob("long", 0.0, horizon, 1)
    long_b = DlJob("long", 0.0, 20 * horizon, 1)
    cluster = DlCluster(nodes=1, gpus_per_node=8, checkpoint_s=60.0, restart_s=5.0)
    log_a = run(name, [long_a, *base], cluster).log
    log_b = run(name, [long_b, *base], cluster).log
    same = _before(log_a, horizon) == _before(log_b, horizon)
    assert same is (name != "sjf-oracle")


def test_gittins_learns_from_finished_jobs_within_the_horizon() -> None:
    # the look-ahead test above only means something if gittins used its learned index there
    base = random_jobs(7, n=80, span=3000.0)
    jobs = [DlJob("long", 0.0, 5000.0, 1), *base]
    policy = make_dl_policy("gittins", np.zeros(len(jobs)))
    run_dl(jobs, DlCluster(nodes=1, gpus_per_node=8, checkpoint_s=60.0, restart_s=5.0), policy)
    assert getattr(policy, "refits", 0) > 0


# ----------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", list(DL_POLICIES))
def test_same_input_same_result(name: str) -> None:
    cluster = DlCluster(nodes=2, gpus_per_node=8, checkpoint_s=120.0, restart_s=30.0)
    a = run(name, random_jobs(3), cluster)
    b = run(name, random_jobs(3), cluster)
    assert a.log == b.log
    assert np.array_equal(a.jct, b.jct)
    assert a.metrics() | {"wall_s": 0} == b.metrics() | {"wall_s": 0}


# ----------------------------------------------------------------------------- inputs


def test_unknown_policy_and_bad_inputs() -> None:
    with pytest.raises(DlPolicyError, match="unknown DL policy 'srpt'"):
        make_dl_policy("srpt", np.zeros(1))
    cluster = DlCluster(nodes=1, gpus_per_node=8)
    with pytest.raises(ValueError, match="needs 16 GPUs"):
        run("fifo", jobs_of((0.0, 1.0, 16)), cluster)
    with pytest.raises(ValueError, match="sorted"):
        run("fifo", jobs_of((5.0, 1.0, 1), (1.0, 1.0, 1)), cluster)
    with pytest.raises(ValueError, match="at least one job"):
        run("fifo", [], cluster)
    with pytest.raises(ValueError, match="spread_speed"):
        DlCluster(nodes=1, spread_speed=0.0)
    with pytest.raises(ValueError, match="gpus"):
        DlJob("x", 0.0, 1.0, 0)


def test_cluster_sizing_rule() -> None:
    # 10 jobs of 4 GPUs × 3600 s submitted over 9 hours: 4.44 GPUs offered on average
    jobs = [DlJob(f"j{i}", i * 3600.0, 3600.0, 4) for i in range(10)]
    assert offered_gpus(jobs) == pytest.approx(40 / 9)
    assert sized_cluster(jobs, load=0.8).nodes == 1  # ceil(4.44 / 6.4)
    assert sized_cluster(jobs, load=0.1).nodes == 6  # ceil(4.44 / 0.8)
    big = [*jobs[:9], DlJob("big", 9 * 3600.0, 1.0, 20)]
    assert sized_cluster(big, load=0.8).nodes == 3  # the largest job needs 3 nodes
