"""Energy in the simulator: hand-computed energy, power saving through the core, end to end."""

from __future__ import annotations

import math

import pytest

from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.node import NodeState
from fusesched.model.resources import CPU, Resources
from fusesched.policies.registry import CoreConfig
from fusesched.power.model import CPU_NODE, PowerModel
from fusesched.power.saving import PowerState, SavingConfig
from fusesched.sim.engine import Outage, SimJob, Simulation
from fusesched.sim.metrics import energy_summary
from fusesched.sim.power import PowerSetup, PowerSim
from fusesched.sim.workload import homogeneous_nodes, synthetic_workload

MODEL = PowerModel(idle_w=100, peak_w=300, suspended_w=10, wake_s=60, suspend_s=0)
MODELS = {CPU_NODE: MODEL}


def job(job_id: str, cpus: int, runtime: float, submit: float = 0.0) -> SimJob:
    group = TaskGroup("main", cpus, Resources({CPU: 1000}))
    return SimJob(JobSpec(job_id, (group,), walltime_s=runtime, submit_time=submit), runtime)


def run(policy: str, jobs: list[SimJob], nodes: int = 2, **kw: object) -> Simulation:
    config = kw.pop("config", SavingConfig(idle_threshold_s=600))
    setup = PowerSetup(policy, config, models=MODELS, **kw)  # type: ignore[arg-type]
    sim = Simulation(homogeneous_nodes(nodes, 4 * nodes), jobs, CoreConfig(), power=PowerSim(setup))
    sim.result = sim.run()  # type: ignore[attr-defined]
    return sim


def test_always_on_energy_by_hand() -> None:
    # n00000 runs 2 of its 4 CPUs for an hour (200 W), n00001 idles (100 W): 0.3 kWh
    sim = run("always-on", [job("a", 2, 3600.0)])
    report = sim.result.power  # type: ignore[attr-defined]
    assert report.energy_kwh == pytest.approx((200 + 100) * 3600 / 3.6e6)
    assert report.node_hours["busy"] == pytest.approx(1.0)
    assert report.node_hours["idle"] == pytest.approx(1.0)
    assert report.kwh_per_month == pytest.approx(report.energy_kwh * 30 * 24)


def test_idle_timeout_energy_by_hand() -> None:
    # n00001 idles 600 s at 100 W, then is suspended (10 W) for the remaining 3000 s
    sim = run("idle-timeout", [job("a", 4, 3600.0)])
    report = sim.result.power  # type: ignore[attr-defined]
    expected = 300 * 3600 + 100 * 600 + 10 * 3000
    assert report.energy_kwh == pytest.approx(expected / 3.6e6)
    assert report.suspends == 1 and report.resumes == 0
    assert sim.core.cluster.states[1] is NodeState.SUSPENDED


def test_metering_window_and_wake_latency() -> None:
    # the second job needs the suspended node: it is resumed and waits for the wake (60 s)
    jobs = [job("a", 4, 3600.0), job("b", 4, 100.0, submit=1200.0)]
    sim = run("idle-timeout", jobs, meter=(0.0, 2000.0))
    out = {o.job_id: o for o in sim.result.outcomes}  # type: ignore[attr-defined]
    assert out["b"].start == pytest.approx(1260.0)  # resumed at the 1200 s tick, up at 1260
    report = sim.result.power  # type: ignore[attr-defined]
    # n00000: 300 W all along; n00001: idle 600 s, suspended 600 s, waking 60 s at idle
    # power, busy 100 s (to 1360 s), idle 620 s (suspended again at the 1980 s tick), then
    # suspended 20 s to the end of the window at 2000 s
    expected = 300 * 2000 + 100 * 600 + 10 * 600 + 100 * 60 + 300 * 100 + 100 * 620 + 10 * 20
    assert report.energy_kwh == pytest.approx(expected / 3.6e6)
    assert report.span_s == 2000.0


def test_resume_timeout_marks_the_node_failed() -> None:
    jobs = [job("a", 4, 3600.0), job("b", 4, 100.0, submit=1200.0)]
    config = SavingConfig(idle_threshold_s=600, resume_timeout_s=120)
    sim = run("idle-timeout", jobs, config=config, wake_failure_rate=1.0)
    report = sim.result.power  # type: ignore[attr-defined]
    assert report.failed == 1
    assert sim.core.cluster.states[1] is NodeState.DOWN
    b = next(o for o in sim.result.outcomes if o.job_id == "b")  # type: ignore[attr-defined]
    assert b.start == pytest.approx(3600.0)  # ran on the first node once it was free


def test_end_to_end_saving_saves_and_always_on_matches_the_model() -> None:
    w = synthetic_workload(jobs=300, nodes=16, seed=3)
    plain = Simulation(w.nodes, w.jobs, CoreConfig()).run()
    results = {}
    for policy in ("always-on", "idle-timeout", "forecast"):
        setup = PowerSetup(
            policy, SavingConfig(idle_threshold_s=900), models=MODELS, forecast_bin_s=300
        )
        results[policy] = Simulation(w.nodes, w.jobs, CoreConfig(), power=PowerSim(setup)).run()
    on = results["always-on"]
    # always-on: the same schedule as without the power hook ...
    assert [(o.job_id, o.start, o.end) for o in on.outcomes] == [
        (o.job_id, o.start, o.end) for o in plain.outcomes
    ]
    # ... and the energy of the model: every node idle all along + (peak - idle) per CPU-second
    assert on.power is not None
    end = max(o.end for o in on.outcomes)
    cpu_s = sum((o.end - o.start) * o.cpus for o in on.outcomes)
    expected = 16 * MODEL.idle_w * end + (MODEL.peak_w - MODEL.idle_w) * cpu_s / 4
    assert on.power.energy_kwh == pytest.approx(expected / 3.6e6, rel=1e-9)
    for policy in ("idle-timeout", "forecast"):
        r = results[policy]
        assert r.power is not None and r.power.suspends > 0
        assert all(not math.isnan(o.start) for o in r.outcomes)  # every job ran
        assert r.power.energy_kwh < on.power.energy_kwh
    # deterministic
    again = Simulation(
        w.nodes,
        w.jobs,
        CoreConfig(),
        power=PowerSim(
            PowerSetup(
                "forecast", SavingConfig(idle_threshold_s=900), models=MODELS, forecast_bin_s=300
            )
        ),
    ).run()
    assert again.power == results["forecast"].power
    summary = energy_summary(results["forecast"])
    assert summary.kwh == results["forecast"].power.energy_kwh
    assert summary.avg_wait_s >= 0


def test_unknown_policy_or_node_type() -> None:
    with pytest.raises(ValueError, match="unknown power-saving policy"):
        PowerSetup("solar")
    sim = Simulation(
        homogeneous_nodes(1, 4), [], CoreConfig(), power=PowerSim(PowerSetup(models={}))
    )
    with pytest.raises(ValueError, match="no power model"):
        sim.run()


def test_a_node_down_in_an_outage_is_not_suspended_and_states_agree_after() -> None:
    # node 1 is out from 120 s to 1,320 s; idle-timeout (600 s) must not suspend it while it is
    # down (it is no warm capacity), and once it is back, core and power states must agree
    nodes = homogeneous_nodes(2, 8)
    setup = PowerSetup("idle-timeout", SavingConfig(idle_threshold_s=600), models=MODELS)
    power = PowerSim(setup)
    sim = Simulation(
        nodes,
        [job("a", 4, 3600.0)],
        CoreConfig(),
        power=power,
        outages=[Outage(120.0, (nodes[1].name,), 1200.0)],
    )
    result = sim.run()
    assert result.power is not None and result.power.suspends == 1
    assert power.since[1] >= 1320.0  # suspended only after the outage
    core = sim.core.cluster.states
    for row in range(2):
        suspended = power.state[row] is PowerState.SUSPENDED
        assert suspended == (core[row] is NodeState.SUSPENDED)
