"""The ``predictive`` power-saving policy and its rise forecast, table-tested (pure)."""

from __future__ import annotations

import pytest

from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.resources import CPU, Resources
from fusesched.policies.registry import CoreConfig
from fusesched.power.forecast import RiseForecaster
from fusesched.power.model import CPU_NODE, PowerModel
from fusesched.power.saving import (
    SAVING_POLICIES,
    NodeView,
    PoolDemand,
    PowerState,
    SavingConfig,
    get_policy,
    plan_power,
)
from fusesched.sim.engine import SimJob, Simulation
from fusesched.sim.power import PowerSetup, PowerSim
from fusesched.sim.workload import homogeneous_nodes, synthetic_workload

ON, OFF = PowerState.ON, PowerState.SUSPENDED
NOW = 10_000.0
CFG = SavingConfig(idle_threshold_s=1800, predictive_min_idle_s=120)


def idle(name: str, idle_for: float) -> NodeView:
    return NodeView(name, "a", ON, busy=False, since=NOW - idle_for)


def busy(name: str) -> NodeView:
    return NodeView(name, "a", ON, busy=True, since=0.0)


def asleep(name: str, since: float) -> NodeView:
    return NodeView(name, "a", OFF, since=since)


def plan(nodes: list[NodeView], demand: PoolDemand, config: SavingConfig = CFG) -> tuple:
    p = plan_power("predictive", NOW, nodes, {"a": demand}, config)
    assert plan_power("predictive", NOW, nodes, {"a": demand}, config) == p  # pure
    return p.suspend, p.resume


def test_registered_by_name() -> None:
    assert "predictive" in SAVING_POLICIES
    assert get_policy("predictive") is SAVING_POLICIES["predictive"]


def test_suspends_nodes_no_arrival_needs_after_the_short_threshold() -> None:
    # 1 busy; the arrivals of the keep look-ahead need 1 more: of 3 idle nodes the two
    # longest idle for >= 120 s go at once (idle-timeout would wait 1,800 s)
    nodes = [busy("n1"), idle("n2", 200), idle("n3", 150), idle("n4", 100), idle("n5", 30)]
    demand = PoolDemand(rise_nodes=0.5, rise_keep_nodes=1.0)
    # awake 5, wanted awake 1 + 1, keep 2: 3 may go, but n4 and n5 are idle < 120 s
    assert plan(nodes, demand) == (("n2", "n3"), ())
    assert plan_power("idle-timeout", NOW, nodes, {"a": demand}, CFG).suspend == ()


def test_nodes_kept_for_arrivals_go_only_after_the_idle_threshold() -> None:
    # wake headroom 0, keep 2: n2 and n3 are within keep; n2 idle past 1,800 s still goes
    nodes = [busy("n1"), idle("n2", 2000), idle("n3", 500)]
    assert plan(nodes, PoolDemand(rise_nodes=0.0, rise_keep_nodes=2.0)) == (("n2",), ())


def test_wakes_ahead_of_predicted_arrivals() -> None:
    # nothing waits, but 1.5 nodes of arrivals are expected within the wake look-ahead:
    # 2 nodes are woken now (longest asleep first), before any job has to wait for them
    nodes = [busy("n1"), asleep("n2", 3.0), asleep("n3", 2.0), asleep("n4", 1.0)]
    demand = PoolDemand(queued_nodes=0.0, rise_nodes=1.5, rise_keep_nodes=1.5)
    assert plan(nodes, demand) == ((), ("n4", "n3"))
    assert plan_power("idle-timeout", NOW, nodes, {"a": demand}, CFG).resume == ()


def test_never_below_the_reserve_nor_what_waits() -> None:
    # 3 nodes' worth of jobs wait (they cannot start yet) and the reserve is 1: all 4 idle
    # nodes stay, however short the threshold and however low the forecast
    nodes = [idle(f"n{i}", 5000) for i in range(4)]
    config = SavingConfig(predictive_min_idle_s=0, default_min_warm=1)
    demand = PoolDemand(queued_nodes=3.0, rise_nodes=0.0, rise_keep_nodes=0.0)
    assert plan(nodes, demand, config) == ((), ())
    # with 2 waiting, one may go
    demand = PoolDemand(queued_nodes=2.0, rise_nodes=0.0, rise_keep_nodes=0.0)
    assert plan(nodes, demand, config) == (("n0",), ())


def test_without_a_forecast_it_is_idle_timeout() -> None:
    cases = [
        ([busy("n1"), idle("n2", 1799), idle("n3", 1800), idle("n4", 5000)], PoolDemand()),
        ([busy("n1"), idle("n2", 10), asleep("n3", 5), asleep("n4", 1)], PoolDemand(2.5)),
    ]
    for nodes, demand in cases:
        mine = plan_power("predictive", NOW, nodes, {"a": demand}, CFG)
        theirs = plan_power("idle-timeout", NOW, nodes, {"a": demand}, CFG)
        assert (mine.suspend, mine.resume) == (theirs.suspend, theirs.resume)
    # only a wake forecast: idle-timeout's suspends, plus the headroom woken
    nodes = [busy("n1"), idle("n2", 500), asleep("n3", 1.0)]
    assert plan(nodes, PoolDemand(rise_nodes=2.0)) == ((), ("n3",))


def test_config_rejects_negative_thresholds() -> None:
    with pytest.raises(ValueError):
        SavingConfig(predictive_min_idle_s=-1)


# ---------------------------------------------------------------- the rise forecast


def test_rise_forecaster_sums_rises_and_ignores_falls() -> None:
    f = RiseForecaster(bin_s=600, season_s=6000, margin=0.0)
    assert f.upper("a", 0.0, 600) is None
    # bin 0: demand 0 -> 5 -> 3 -> 6: rises 5 and 3 (the fall of 2 is no arrival): 8
    for t, v in ((0, 0.0), (60, 5.0), (120, 3.0), (180, 6.0)):
        f.observe(float(t), {"a": v})
    assert f.upper("a", 200.0, 600) is None  # no bin closed yet
    f.observe(600.0, {"a": 6.0})  # closes bin 0 (sum 8)
    assert f.upper("a", 600.0, 600) == pytest.approx(8.0)
    # scaled to the horizon: half a bin -> half the bin's rise
    assert f.upper("a", 600.0, 300) == pytest.approx(4.0)


def test_rise_forecaster_follows_quiet_periods_down_and_margin_override() -> None:
    f = RiseForecaster(bin_s=600, season_s=6000, margin=0.0)
    t = 0.0
    for step in range(40):  # 4 bins with 10 rises of 1 each, then quiet
        f.observe(t, {"a": float(step)})
        t += 60.0
    busy_estimate = f.upper("a", t, 600)
    for _ in range(60):  # 6 quiet bins
        f.observe(t, {"a": 39.0})
        t += 60.0
    quiet = f.upper("a", t, 600)
    assert busy_estimate is not None and quiet is not None
    assert quiet < busy_estimate
    wide = f.upper("a", t, 600, margin=2.0)
    narrow = f.upper("a", t, 600, margin=-2.0)
    assert wide is not None and narrow is not None and narrow <= quiet <= wide
    assert narrow >= 0.0  # never a negative rise


# ---------------------------------------------------------------- in the simulator

MODEL = PowerModel(idle_w=100, peak_w=300, suspended_w=10, wake_s=60, suspend_s=0)


def test_in_the_simulator_saves_energy_and_is_deterministic() -> None:
    w = synthetic_workload(jobs=300, nodes=16, seed=3)

    def once(policy: str) -> object:
        setup = PowerSetup(
            policy,
            SavingConfig(idle_threshold_s=900, predictive_min_idle_s=120),
            models={CPU_NODE: MODEL},
            forecast_bin_s=300,
        )
        return Simulation(w.nodes, w.jobs, CoreConfig(), power=PowerSim(setup)).run()

    on, mine = once("always-on"), once("predictive")
    assert mine.power is not None and on.power is not None  # type: ignore[attr-defined]
    assert mine.power.suspends > 0  # type: ignore[attr-defined]
    assert mine.power.energy_kwh < on.power.energy_kwh  # type: ignore[attr-defined]
    assert all(o.start == o.start for o in mine.outcomes)  # type: ignore[attr-defined]
    assert once("predictive").power == mine.power  # type: ignore[attr-defined]


def test_in_the_simulator_wakes_a_node_before_the_job_arrives() -> None:
    # a 4-CPU job arrives every hour on a 2-node cluster (4 CPUs each), each needing a node
    # of its own beside a long job: after a day of history the forecast expects the arrival
    # and the node is awake when it comes, so the job no longer waits for the wake
    group = TaskGroup("main", 4, Resources({CPU: 1000}))
    jobs = [SimJob(JobSpec("long", (group,), walltime_s=4e5, submit_time=0.0), 4e5)]
    for k in range(1, 60):
        spec = JobSpec(f"j{k}", (group,), walltime_s=600.0, submit_time=k * 3600.0)
        jobs.append(SimJob(spec, 600.0))

    def waits(policy: str, margin: float | None) -> list[float]:
        setup = PowerSetup(
            policy,
            SavingConfig(idle_threshold_s=900, predictive_min_idle_s=120),
            models={CPU_NODE: MODEL},
            forecast_bin_s=600,
            rise_margin=margin,
            rise_keep_margin=None,
        )
        sim = Simulation(homogeneous_nodes(2, 8), jobs, CoreConfig(), power=PowerSim(setup))
        out = {o.job_id: o.start - o.submit for o in sim.run().outcomes}
        return [out[f"j{k}"] for k in range(40, 60)]

    assert min(waits("idle-timeout", None)) >= 60.0  # every job waits for a wake
    early = waits("predictive", 0.0)
    assert sum(w < 60.0 for w in early) >= len(early) // 2
