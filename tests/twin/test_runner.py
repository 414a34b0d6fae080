"""Twin runs: deterministic, what-if changes move the metrics the right way, injected
outages end and requeue the jobs on the failed nodes."""

from __future__ import annotations

from tests.twin.builders import snapshot

from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.node import NodeSpec
from fusesched.model.resources import Resources
from fusesched.policies.registry import CoreConfig
from fusesched.sim.engine import Outage, SimJob, Simulation
from fusesched.twin.runner import RunOptions, observed, run
from fusesched.twin.scenario import parse_scenario


def test_the_same_snapshot_scenario_and_seed_give_the_same_result() -> None:
    snap = snapshot(120, tenancy=True)
    scenario = parse_scenario(
        {
            "arrival": {"rate": 3, "jitter_s": 5},
            "failures": [{"at_s": 50, "duration_s": 100, "gpu_model": "H200"}],
            "power": {"policy": "idle-timeout", "idle_threshold_s": 60},
        }
    )
    first = run(snap, scenario, 3).as_dict()
    assert run(snapshot(120, tenancy=True), scenario, 3).as_dict() == first
    assert run(snap, scenario, 4).as_dict() != first  # another seed, other jitter


def test_more_load_waits_longer_and_more_nodes_wait_less() -> None:
    snap = snapshot(150)
    options = RunOptions(energy=False, fragmentation=False)
    base = run(snap, parse_scenario({}), 0, options).overall["avg_wait_s"]
    busy = run(snap, parse_scenario({"arrival": {"rate": 4}}), 0, options).overall["avg_wait_s"]
    more = run(
        snap,
        parse_scenario({"arrival": {"rate": 4}, "nodes": {"add": [{"match": {}, "count": 4}]}}),
        0,
        options,
    ).overall["avg_wait_s"]
    assert busy > base
    assert more < busy


def test_results_carry_every_metric_of_the_report() -> None:
    result = run(snapshot(60, tenancy=True), parse_scenario({"name": "x"}), 0)
    assert result.scenario == "x" and result.nodes == 4 and result.gpus == 8
    assert set(result.tenants) == {"ops", "research"}
    assert set(result.queues) == {"batch", "train"}
    assert result.energy_kwh is not None and result.energy_kwh > 0
    assert result.fragmentation is not None and 0 <= result.fragmentation <= 1
    assert 0 < result.gpu_utilization <= 1
    live = observed(snapshot(60))
    assert live.overall["jobs"] == 60 and live.overall["avg_wait_s"] == 0.0


def _job(i: int, submit: float, runtime: float, checkpoint: float | None = None) -> SimJob:
    spec = JobSpec(
        id=str(i),
        task_groups=(TaskGroup("main", 1, Resources.parse({"cpu": "4"})),),
        submit_time=submit,
        walltime_s=1000,
        checkpoint_interval_s=checkpoint,
    )
    return SimJob(spec, runtime)


NODES = [NodeSpec("a", Resources.parse({"cpu": "4"})), NodeSpec("b", Resources.parse({"cpu": "4"}))]


def test_an_outage_requeues_the_jobs_on_its_nodes_and_keeps_checkpointed_work() -> None:
    jobs = [_job(1, 0, 100, checkpoint=30), _job(2, 0, 100), _job(3, 0, 50)]
    outage = Outage(70.0, ("a",), 200.0)
    result = Simulation(NODES, jobs, CoreConfig(), outages=[outage], restart_overhead_s=5).run()
    by_id = {o.job_id: o for o in result.outcomes}
    # job 1 on a, job 2 on b, job 3 waits; a fails at 70: job 1 is requeued with 60 s kept
    assert by_id["1"].failures == 1 and by_id["2"].failures == 0
    assert by_id["1"].lost_s == 10.0
    # job 2 ends at 100 and frees b: job 1 (first in FCFS order, by its submit time) starts
    # again there for the rest of its work and the restart cost; job 3 follows
    assert by_id["1"].start == 0.0  # the first start is kept
    assert by_id["1"].end == 100.0 + 40.0 + 5.0
    assert by_id["3"].start == 145.0
    assert result.outcomes and all(o.end == o.end for o in result.outcomes)


def test_a_node_down_for_good_and_a_job_without_checkpoints() -> None:
    jobs = [_job(1, 0, 100), _job(2, 10, 10)]
    result = Simulation(
        NODES[:1] + NODES[1:], jobs, CoreConfig(), outages=[Outage(50, ("a",))]
    ).run()
    by_id = {o.job_id: o for o in result.outcomes}
    assert by_id["1"].lost_s == 50.0  # everything lost
    assert by_id["2"].start == 10.0  # on b
    assert by_id["1"].end == 50.0 + 100.0  # restarted on b at once (b is free at 20)


def test_no_outages_leaves_the_replay_as_it_was() -> None:
    jobs = [_job(i, i * 3.0, 20.0 + i) for i in range(20)]
    plain = Simulation(NODES, jobs, CoreConfig()).run()
    empty = Simulation(NODES, jobs, CoreConfig(), outages=[]).run()
    assert [(o.start, o.end) for o in plain.outcomes] == [(o.start, o.end) for o in empty.outcomes]
