"""The simulator around the core: determinism, every policy on a synthetic workload, metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from builders import job, node, nodes
from fusesched.model.events import Decision, RejectJob, ReserveJob, StartJob
from fusesched.model.phases import JobPhase
from fusesched.policies.queue_order import QUEUE_ORDERS
from fusesched.policies.registry import BACKFILL_MODES, CoreConfig
from fusesched.sim.engine import SimJob, Simulation, replay
from fusesched.sim.metrics import (
    BSLD_THRESHOLD_S,
    bounded_slowdown,
    per_queue,
    summarize,
)
from fusesched.sim.workload import homogeneous_nodes, synthetic_workload

SMALL = synthetic_workload(jobs=120, nodes=16, seed=5)  # 64 CPUs: every job fits


def normal(decision: Decision) -> tuple[object, ...]:
    """A decision as plain values (independent of how placements are stored)."""
    if isinstance(decision, StartJob):
        groups = tuple((g.group, g.resources, g.nodes, tuple(g.counts)) for g in decision.groups)
        return ("start", decision.job_id, groups, decision.backfilled)
    if isinstance(decision, ReserveJob):
        return ("reserve", decision.job_id, decision.start_time)
    return (type(decision).__name__, decision.job_id, getattr(decision, "reason", ""))


# ============================================================================ determinism


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
@pytest.mark.parametrize("order", ["fcfs", "wfp3-textbook"])
def test_same_input_same_output(backfill: str, order: str) -> None:
    config = CoreConfig(queue_order=order, backfill=backfill)
    first = Simulation(SMALL.nodes, SMALL.jobs, config, seed=7, keep_log=True).run()
    second = Simulation(SMALL.nodes, SMALL.jobs, config, seed=7, keep_log=True).run()
    assert first.log, "keep_log=True keeps the decisions"
    assert [normal(d) for d in first.log] == [normal(d) for d in second.log]
    assert (first.decisions, first.cycles) == (second.decisions, second.cycles)
    assert first.decisions == len(first.log)
    assert summarize(first.outcomes, first.total_cpus) == summarize(
        second.outcomes, second.total_cpus
    )
    assert [(o.job_id, o.start, o.end, o.backfilled) for o in first.outcomes] == [
        (o.job_id, o.start, o.end, o.backfilled) for o in second.outcomes
    ]


def test_decision_logs_compare_as_values() -> None:
    # decisions are frozen value objects: two identical runs give equal logs, so a parity
    # test (simulator vs live controller) can compare them directly
    config = CoreConfig()
    jobs = [SimJob(job("wide").tasks(8, cpu=1).walltime(10).build(), 10.0)]
    first = Simulation(nodes(2, cpu=4), jobs, config, keep_log=True).run().log
    second = Simulation(nodes(2, cpu=4), jobs, config, keep_log=True).run().log
    assert first == second


def test_log_is_empty_unless_asked_for() -> None:
    result = Simulation(SMALL.nodes, SMALL.jobs[:10], CoreConfig()).run()
    assert result.log == []
    assert result.decisions > 0


def test_job_order_in_the_input_does_not_matter() -> None:
    config = CoreConfig(backfill="easy")
    forward = Simulation(SMALL.nodes, SMALL.jobs, config, keep_log=True).run()
    backward = Simulation(SMALL.nodes, SMALL.jobs[::-1], config, keep_log=True).run()
    assert [normal(d) for d in forward.log] == [normal(d) for d in backward.log]


def test_synthetic_workload_is_deterministic() -> None:
    a = synthetic_workload(jobs=50, nodes=4, seed=3)
    b = synthetic_workload(jobs=50, nodes=4, seed=3)
    c = synthetic_workload(jobs=50, nodes=4, seed=4)
    assert a == b
    assert a.jobs != c.jobs
    assert a.total_cpus == 16
    assert [j.spec.submit_time for j in a.jobs] == sorted(j.spec.submit_time for j in a.jobs)
    assert all(j.spec.walltime_s is not None and j.spec.walltime_s >= j.runtime for j in a.jobs)


def test_homogeneous_nodes_share_cpus_exactly() -> None:
    specs = homogeneous_nodes(3, 10)
    assert [n.capacity["cpu"] // 1000 for n in specs] == [4, 3, 3]


# ============================================================================ every policy


@pytest.mark.parametrize("backfill", list(BACKFILL_MODES))
@pytest.mark.parametrize("order", list(QUEUE_ORDERS))
def test_synthetic_workload_runs_under_every_policy(backfill: str, order: str) -> None:
    config = CoreConfig(queue_order=order, backfill=backfill)
    result = Simulation(SMALL.nodes, SMALL.jobs, config).run()
    runtime = {j.spec.id: j.runtime for j in SMALL.jobs}
    assert len(result.outcomes) == len(SMALL.jobs)
    for o in result.outcomes:
        assert not o.rejected
        assert o.start >= o.submit
        assert o.end == o.start + runtime[o.job_id]
        assert o.nodes >= 1
    metrics = summarize(result.outcomes, result.total_cpus)
    assert metrics.jobs == len(SMALL.jobs)
    assert metrics.rejected == 0
    assert 0 < metrics.utilization <= 1
    assert metrics.avg_bounded_slowdown >= 1
    assert metrics.avg_response_s >= metrics.avg_wait_s >= 0
    assert metrics.p95_wait_s >= 0
    if backfill == "none":
        assert metrics.backfilled == 0
    # the running CPUs never exceed the machine
    events = sorted(
        [(o.end, -o.cpus) for o in result.outcomes] + [(o.start, o.cpus) for o in result.outcomes]
    )
    in_use = np.cumsum([c for _, c in events])
    assert in_use.max() <= result.total_cpus + 1e-9


def test_backfill_helps_on_the_synthetic_workload() -> None:
    def bsld(backfill: str) -> float:
        result = Simulation(SMALL.nodes, SMALL.jobs, CoreConfig(backfill=backfill)).run()
        return summarize(result.outcomes, result.total_cpus).avg_bounded_slowdown

    assert bsld("easy") < bsld("none")


def test_replay_is_simulation_run() -> None:
    config = CoreConfig()
    a = replay(SMALL.nodes, SMALL.jobs, config)
    b = Simulation(SMALL.nodes, SMALL.jobs, config).run()
    assert summarize(a.outcomes, a.total_cpus) == summarize(b.outcomes, b.total_cpus)


# ============================================================================ metrics


@pytest.mark.parametrize(
    ("wait", "run", "expected"),
    [
        (0.0, 100.0, 1.0),
        (90.0, 5.0, 9.5),  # short job: divided by the 10 s threshold, not by 5 s
        (80.0, 50.0, 2.6),
        (10.0, 100.0, 1.1),
        (0.0, 5.0, 1.0),  # never below 1
        (0.0, 0.0, 1.0),
        (20.0, 10.0, 3.0),
    ],
)
def test_bounded_slowdown(wait: float, run: float, expected: float) -> None:
    got = bounded_slowdown(np.array([wait]), np.array([run]))
    assert got[0] == pytest.approx(expected)
    assert BSLD_THRESHOLD_S == 10.0


def three_jobs() -> list[SimJob]:
    """One 4-CPU node. A (4 CPUs, 100 s) runs from 0; B (2 CPUs, 5 s, submitted at 10) and
    C (2 CPUs, 50 s, submitted at 20) both wait for A and start together at 100."""
    return [
        SimJob(job("A").tasks(4, cpu=1).walltime(100).at(0).queue("x").build(), 100.0),
        SimJob(job("B").tasks(1, cpu=2).walltime(5).at(10).queue("y").build(), 5.0),
        SimJob(job("C").tasks(2, cpu=1).walltime(50).at(20).queue("y").build(), 50.0),
    ]


def test_hand_computed_example() -> None:
    result = Simulation([node("n0").cpu(4).build()], three_jobs(), CoreConfig()).run()
    assert result.total_cpus == 4
    by_id = {o.job_id: o for o in result.outcomes}
    assert [(by_id[j].start, by_id[j].end) for j in "ABC"] == [(0, 100), (100, 105), (100, 150)]
    assert [by_id[j].cpus for j in "ABC"] == [4, 2, 2]
    m = summarize(result.outcomes, result.total_cpus)
    assert m.jobs == 3
    assert m.rejected == 0
    assert m.avg_wait_s == pytest.approx((0 + 90 + 80) / 3)
    assert m.p95_wait_s == pytest.approx(89.0)  # linear between 80 and 90
    assert m.avg_response_s == pytest.approx((100 + 95 + 130) / 3)
    # bsld: A max(1, 100/100) = 1; B (90 + 5)/max(5, 10) = 9.5; C (80 + 50)/50 = 2.6
    assert m.avg_bounded_slowdown == pytest.approx((1 + 9.5 + 2.6) / 3)
    # CPU-seconds used 4·100 + 2·5 + 2·50 = 510 over 4 CPUs × 150 s
    assert m.utilization == pytest.approx(510 / 600)
    assert m.makespan_s == 150
    assert m.backfilled == 0
    assert m.as_dict()["jobs"] == 3


def test_per_queue() -> None:
    result = Simulation([node("n0").cpu(4).build()], three_jobs(), CoreConfig()).run()
    queues = per_queue(result.outcomes, result.total_cpus)
    assert list(queues) == ["x", "y"]
    x, y = queues["x"], queues["y"]
    assert (x.jobs, x.avg_wait_s, x.avg_response_s, x.makespan_s) == (1, 0, 100, 100)
    assert x.utilization == pytest.approx(1.0)
    assert y.jobs == 2
    assert y.avg_wait_s == pytest.approx(85)
    assert y.p95_wait_s == pytest.approx(89.5)
    assert y.avg_response_s == pytest.approx(112.5)
    assert y.avg_bounded_slowdown == pytest.approx((9.5 + 2.6) / 2)
    assert y.makespan_s == 140  # from B's submit (10) to C's end (150)
    assert y.utilization == pytest.approx(110 / (140 * 4))  # relative to the whole cluster


def test_rejected_jobs_are_counted_not_measured() -> None:
    jobs = [*three_jobs(), SimJob(job("huge").tasks(1, cpu=64).walltime(5).at(1).build(), 5.0)]
    result = Simulation([node("n0").cpu(4).build()], jobs, CoreConfig()).run()
    huge = next(o for o in result.outcomes if o.job_id == "huge")
    assert huge.rejected
    assert math.isnan(huge.start)
    m = summarize(result.outcomes, result.total_cpus)
    assert (m.jobs, m.rejected) == (3, 1)
    assert m.avg_wait_s == pytest.approx((0 + 90 + 80) / 3)


def test_no_jobs() -> None:
    m = summarize([], 4.0)
    assert (m.jobs, m.utilization, m.avg_bounded_slowdown) == (0, 0.0, 0.0)


def test_backfilled_jobs_are_counted() -> None:
    jobs = [
        *three_jobs(),
        SimJob(job("D").tasks(1, cpu=1).walltime(50).at(30).build(), 50.0),  # none free yet
        SimJob(job("E").tasks(1, cpu=4).walltime(10).at(40).build(), 10.0),  # waits behind C
        SimJob(job("F").tasks(1, cpu=1).walltime(20).at(101).build(), 20.0),
    ]
    result = Simulation([node("n0").cpu(4).build()], jobs, CoreConfig(backfill="easy")).run()
    m = summarize(result.outcomes, result.total_cpus)
    assert m.backfilled == sum(o.backfilled for o in result.outcomes) >= 1


# ============================================================================ the simulated cluster


@pytest.mark.parametrize("kill", [True, False])
def test_kill_at_walltime(kill: bool) -> None:
    jobs = [SimJob(job("over").tasks(1, cpu=1).walltime(10).build(), 25.0)]
    sim = Simulation([node("n0").cpu(4).build()], jobs, CoreConfig(), kill_at_walltime=kill)
    (outcome,) = sim.run().outcomes
    assert outcome.timed_out is kill
    assert outcome.end == (10.0 if kill else 25.0)
    assert sim.core.jobs["over"].phase is (JobPhase.TIMEOUT if kill else JobPhase.COMPLETED)


def test_exit_codes_reach_the_core() -> None:
    jobs = [
        SimJob(job("ok").tasks(1, cpu=1).walltime(10).build(), 5.0),
        SimJob(job("bad").tasks(1, cpu=1).walltime(10).build(), 5.0, exit_code=3),
        SimJob(job("dep").tasks(1, cpu=1).walltime(10).after_ok("bad").build(), 5.0),
    ]
    sim = Simulation([node("n0").cpu(4).build()], jobs, CoreConfig(), keep_log=True)
    result = sim.run()
    assert sim.core.jobs["ok"].phase is JobPhase.COMPLETED
    assert sim.core.jobs["bad"].phase is JobPhase.FAILED
    assert [d.job_id for d in result.log if isinstance(d, RejectJob)] == ["dep"]
    assert next(o for o in result.outcomes if o.job_id == "dep").rejected


def test_job_arrays_run_in_the_simulator() -> None:
    spec = job("sweep").tasks(1, cpu=1).walltime(10).array(0, 3, max_parallel=2).build()
    sim = Simulation([node("n0").cpu(4).build()], [SimJob(spec, 10.0)], CoreConfig())
    sim.run()
    assert {j: r.phase for j, r in sim.core.jobs.items()} == {
        f"sweep_{i}": JobPhase.COMPLETED for i in range(4)
    }


def test_kill_at_walltime_ends_overrunning_jobs_with_timeout() -> None:
    cluster = [node("n0").cpu(4).build()]
    spec = job("long").tasks(1, cpu=1).walltime(100).build()
    sim = Simulation(cluster, [SimJob(spec, runtime=500.0)], CoreConfig(), kill_at_walltime=True)
    (outcome,) = sim.run().outcomes
    assert outcome.timed_out and outcome.end - outcome.start == 100.0
    assert sim.core.jobs["long"].phase is JobPhase.TIMEOUT
