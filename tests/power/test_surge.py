"""The ``surge`` power-saving policy: its tracker, its plan, the simulator and the controller."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.power.test_predictive import NOW, ON, busy, idle

from fusesched.controller.power import PowerConfig, PowerManager
from fusesched.core.cluster import ClusterArrays
from fusesched.model.job import JobSpec, TaskGroup
from fusesched.model.resources import CPU, Resources
from fusesched.policies.registry import CoreConfig
from fusesched.power.forecast import DAY, SurgeTracker
from fusesched.power.model import CPU_NODE, PowerModel
from fusesched.power.saving import NodeView, PoolDemand, PowerState, SavingConfig, plan_power
from fusesched.sim.engine import SimJob, Simulation
from fusesched.sim.power import PowerSetup, PowerSim
from fusesched.sim.workload import homogeneous_nodes

CFG = SavingConfig(idle_threshold_s=1800, surge_min_idle_s=120)


def asleep(name: str) -> NodeView:
    return NodeView(name, "a", PowerState.SUSPENDED, since=0.0)


def plan(nodes: list[NodeView], demand: PoolDemand, config: SavingConfig = CFG) -> tuple:
    p = plan_power("surge", NOW, nodes, {"a": demand}, config)
    assert plan_power("surge", NOW, nodes, {"a": demand}, config) == p  # pure
    return p.suspend, p.resume, p.targets["a"]


# ---------------------------------------------------------------- the tracker


def feed(tracker: SurgeTracker, samples: list[tuple[float, float]]) -> None:
    for t, v in samples:
        tracker.observe(t, {"a": v})


def test_tracker_keeps_the_largest_rise_within_the_horizon() -> None:
    tracker = SurgeTracker(horizon_s=300, memory_days=1, bin_s=600, warm_s=0)
    # +3 within 120 s, then a slow climb of +1 per 400 s (never 2 within 300 s), then a fall
    feed(tracker, [(0, 2), (60, 3), (120, 5), (520, 6), (920, 7), (1320, 8), (1380, 1)])
    assert tracker.upper("a", 1400) == 3.0
    # a fall followed by a rise counts from the low point: 1 → 6 within 240 s
    feed(tracker, [(1500, 4), (1620, 6)])
    assert tracker.upper("a", 1700) == 5.0
    assert tracker.upper("b", 1700) is None  # a pool never seen


def test_tracker_forgets_what_is_older_than_its_memory_even_after_a_gap() -> None:
    tracker = SurgeTracker(horizon_s=600, memory_days=1, bin_s=600, warm_s=0)
    feed(tracker, [(0, 0), (300, 10)])  # a surge of 10 in bin 0
    # the ring holds 144 bins: bin 0 counts up to the end of bin 143, not from bin 144 on
    assert tracker.upper("a", 143 * 600 + 599) == 10.0
    assert tracker.upper("a", 144 * 600) == 0.0
    # a sample after a silence longer than the memory: the old surge is not in it
    feed(tracker, [(2 * DAY, 3.0)])
    assert tracker.upper("a", 2 * DAY) == 0.0


def test_tracker_forgets_after_its_memory_and_waits_until_warm() -> None:
    tracker = SurgeTracker(horizon_s=600, memory_days=2, bin_s=600, warm_s=DAY)
    feed(tracker, [(0, 0), (300, 10)])  # a surge of 10 on day 0
    assert tracker.upper("a", 3600) is None  # not warm yet: the policy keeps all awake
    quiet = [(300 + k * 600.0, float(k % 2)) for k in range(1, 4 * 144)]  # +1 rises after it
    feed(tracker, [s for s in quiet if s[0] <= DAY + 600])
    assert tracker.upper("a", DAY + 600) == 10.0  # remembered on day 1
    feed(tracker, [s for s in quiet if DAY + 600 < s[0] <= 2 * DAY + 1200])
    assert tracker.upper("a", 2 * DAY + 1200) == 1.0  # forgotten after two days


@pytest.mark.parametrize(
    "kwargs",
    [
        {"horizon_s": 0},
        {"horizon_s": 60, "bin_s": 0},
        {"horizon_s": 60, "warm_s": -1},
        {"horizon_s": 60, "memory_days": 0},
    ],
)
def test_tracker_rejects_bad_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SurgeTracker(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the policy


def test_without_history_the_pool_is_held_as_it_is() -> None:
    nodes = [busy("b"), idle("i", 5000), asleep("s1"), asleep("s2")]
    # nothing suspended, however long idle; the sleeping nodes are not woken for nothing
    suspend, resume, target = plan(nodes, PoolDemand(surge_nodes=None))
    assert suspend == () and resume == () and target == 2
    # ... but they are for jobs that wait
    suspend, resume, target = plan(nodes, PoolDemand(queued_nodes=2.0, surge_nodes=None))
    assert suspend == () and resume == ("s1",) and target == 3


def test_keeps_a_headroom_of_the_largest_surge_and_suspends_the_rest_early() -> None:
    nodes = [busy("b"), idle("i1", 4000), idle("i2", 3000), idle("i3", 200), idle("i4", 60)]
    # headroom 2: busy 1 + 2 = 3 awake; of the four idle nodes two go, longest idle first
    suspend, resume, target = plan(nodes, PoolDemand(surge_nodes=1.5))
    assert target == 3 and suspend == ("i1", "i2") and resume == ()
    # a node idle for less than surge_min_idle_s stays even beyond the headroom
    suspend, _, _ = plan(nodes, PoolDemand(surge_nodes=0.0))
    assert suspend == ("i1", "i2", "i3")


def test_wakes_nodes_when_the_headroom_is_used() -> None:
    nodes = [busy("b1"), busy("b2"), idle("i", 300), asleep("s1"), asleep("s2")]
    # a surge of 3 expected, one idle node left: two are woken
    suspend, resume, target = plan(nodes, PoolDemand(surge_nodes=3.0))
    assert target == 5 and suspend == () and resume == ("s1", "s2")
    # waiting jobs add to it, and the warm reserve is a floor
    reserve = SavingConfig(surge_min_idle_s=120, default_min_warm=2)
    assert plan(nodes[:3], PoolDemand(queued_nodes=1.0, surge_nodes=0.0), reserve)[2] == 5


def test_short_threshold_is_validated_and_whole_floats_are_counts() -> None:
    with pytest.raises(ValueError):
        SavingConfig(surge_min_idle_s=-1)
    config = SavingConfig(default_min_warm=2.0, min_warm={"a": 1.0})  # type: ignore[arg-type]
    assert config.reserve("a") == 1 and type(config.reserve("b")) is int


# ---------------------------------------------------------------- in the simulator

MODEL = PowerModel(idle_w=100, peak_w=300, suspended_w=10, wake_s=120, suspend_s=0)


def test_in_the_simulator_jobs_no_longer_wait_and_energy_is_saved() -> None:
    # a 2-node job (8 CPUs) every hour for 10 minutes on an 8-node cluster of 4-CPU nodes:
    # idle-timeout (15 min) suspends the nodes between jobs and every job waits for a wake;
    # surge learns on day one that demand jumps by two nodes, keeps two booted (two more while
    # a job runs) and switches the rest off: after its first day no job waits, and it saves
    # energy
    group = TaskGroup("main", 8, Resources({CPU: 1000}))
    jobs = [
        SimJob(JobSpec(f"j{k}", (group,), walltime_s=600.0, submit_time=k * 3600.0 + 30), 600.0)
        for k in range(48)
    ]

    def once(policy: str) -> tuple[list[float], float]:
        setup = PowerSetup(
            policy,
            SavingConfig(idle_threshold_s=900, surge_min_idle_s=120),
            models={CPU_NODE: MODEL},
            surge_warm_s=DAY,
        )
        sim = Simulation(homogeneous_nodes(8, 32), jobs, CoreConfig(), power=PowerSim(setup))
        result = sim.run()
        assert result.power is not None
        out = {o.job_id: o.start - o.submit for o in result.outcomes}
        return [out[f"j{k}"] for k in range(25, 48)], result.power.energy_kwh

    on_waits, on_kwh = once("always-on")
    timeout_waits = once("idle-timeout")[0]
    surge_waits, surge_kwh = once("surge")
    assert max(on_waits) == 0.0 and max(surge_waits) == 0.0
    assert min(timeout_waits) >= MODEL.wake_s
    assert surge_kwh < 0.8 * on_kwh
    assert once("surge") == (surge_waits, surge_kwh)  # deterministic


# ---------------------------------------------------------------- the live controller


def test_the_controller_reads_the_settings_and_feeds_the_tracker() -> None:
    cfg = PowerConfig.parse(
        {
            "policy": "surge",
            "suspend": ["true"],
            "resume": ["true"],
            "interval_s": 60,
            "wake_latency_s": 240,
            "surge_min_idle_s": 90,
            "surge_memory_days": 2,
            "surge_warm_s": 600,
        }
    )
    assert cfg.saving.surge_min_idle_s == 90 and cfg.surge_memory_days == 2
    manager = PowerManager(cfg)
    out: dict[str, PoolDemand] = {}
    for step in range(15):  # two nodes become busy at minute 8
        views = [
            NodeView(f"n{i}", "gpu", ON, busy=i < (2 if step >= 8 else 0), since=0.0)
            for i in range(6)
        ]
        out = manager._forecast(views, {}, step * 60.0)
        if step < 10:
            assert out["gpu"].surge_nodes is None  # not warm before 600 s
    assert out["gpu"].surge_nodes == 2.0 and out["gpu"].rise_nodes is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"surge_memory_days": 0}, "surge_memory_days must be a whole number from 1 to 366"),
        ({"surge_memory_days": 1.5}, "surge_memory_days must be a whole number"),
        ({"surge_warm_s": -5}, "surge_warm_s must not be negative"),
        ({"surge_min_idle_s": -5}, "must not be negative"),
        ({"interval_s": 0}, "interval_s must be positive"),
        ({"interval_s": True}, "interval_s must be a number"),
        ({"wake_latency_s": float("nan")}, "must be finite numbers"),
        ({"surge_warm_s": float("inf")}, "must be finite numbers"),
        ({"forecast_bin_s": 0.5}, "forecast_bin_s must be between 1 s and a day"),
        ({"forecast_bin_s": 90_000}, "forecast_bin_s must be between 1 s and a day"),
        ({"surge_memory_days": 10_000_000}, "surge_memory_days must be a whole number from 1"),
        ({"surge_min_idle_s": float("nan")}, "nor NaN"),
        ({"default_min_warm": float("nan")}, "rates and warm reserves must be whole numbers"),
        ({"default_min_warm": 2.5}, "rates and warm reserves must be whole numbers"),
        ({"max_resumes_per_min": float("inf")}, "must be whole numbers"),
        ({"forecast_bin_s": 1, "surge_memory_days": 366}, "must be at most 100,000 bins"),
    ],
)
def test_bad_surge_settings_are_named(change: dict[str, object], message: str) -> None:
    base = {"policy": "surge", "suspend": ["true"], "resume": ["true"]}
    with pytest.raises(ValueError) as error:
        PowerConfig.parse(base | change, "power.yaml")
    assert str(error.value).startswith("power.yaml: ") and message in str(error.value)


def test_a_job_waiting_in_a_pool_without_sleeping_nodes_keeps_its_idle_nodes() -> None:
    # pool "cpu": three powered nodes (one busy, two idle); pool "gpu": one asleep. A job that
    # needs two whole "cpu" nodes waits (one is busy): it is held on "cpu" (nothing to wake),
    # so surge's short threshold does not suspend the two idle nodes under it
    from types import SimpleNamespace

    from fusesched.model.job import Placement
    from fusesched.model.node import LABEL_POOL, NodeSpec, NodeState

    def node(name: str, pool: str, **labels: str) -> SimpleNamespace:
        spec = NodeSpec(name, Resources({CPU: 4000}), {LABEL_POOL: pool, **labels})
        return SimpleNamespace(spec=spec, state=NodeState.UP, drain=None)

    def job(tasks: int, **selector: str) -> SimpleNamespace:
        group = TaskGroup("main", tasks, Resources({CPU: 1000}))
        spec = JobSpec("j", (group,), placement=Placement(node_selector=selector))
        return SimpleNamespace(spec=spec, shape_id=tasks)  # (the core's queue record)

    nodes = {"c1": node("c1", "cpu"), "c2": node("c2", "cpu"), "c3": node("c3", "cpu")}
    nodes["g1"] = node("g1", "gpu")
    queue = SimpleNamespace(records=[job(8, **{"fusesched.io/pool": "cpu"})])
    core = SimpleNamespace(
        queue=queue,
        completing={},
        cluster=ClusterArrays(),
        due_within=lambda horizon_s: [],
        licenses=None,
    )
    ctl = SimpleNamespace(
        nodes=nodes, jobs=["j"], core=core, tasks={}, outliving={}, clock=lambda: 0.0
    )
    manager = PowerManager(PowerConfig(("true",), ("true",), policy="surge"))
    manager._views(ctl, 0.0)  # type: ignore[arg-type]
    manager.nodes["g1"].power = PowerState.SUSPENDED
    demand = manager._demand(ctl)  # type: ignore[arg-type]
    assert demand == {"cpu": PoolDemand(held_nodes=2.0)}
    views = [busy("c1"), idle("c2", 5000), idle("c3", 5000)]
    views = [NodeView(v.name, "cpu", v.power, v.busy, v.since) for v in views]
    held = plan_power("surge", NOW, views, {"cpu": replace(demand["cpu"], surge_nodes=0.0)}, CFG)
    assert held.suspend == () and held.resume == ()
    # a job a sleeping node could run counts there (to wake it), as its share of a node: 1 of
    # 4 CPUs (the policy rounds the pool's sum up: one node woken)
    queue.records[0] = job(1)
    expected = PoolDemand(queued_nodes=0.25, wake_first=("g1",))  # g1 first: it can run it
    assert manager._demand(ctl) == {"gpu": expected}  # type: ignore[arg-type]
    # a node that cannot run the job is not woken for it: "cpu" gets a sleeping node without
    # the label the job asks for, and the job is held on the powered one that has it
    nodes["c1"] = node("c1", "cpu", ib="yes")
    manager._views(ctl, 0.0)  # type: ignore[arg-type]
    manager.nodes["c2"].power = PowerState.SUSPENDED
    queue.records[0] = job(4, ib="yes")
    demand = manager._demand(ctl)  # type: ignore[arg-type]
    assert demand == {"cpu": PoolDemand(held_nodes=1.0)}
    asleep_c2 = NodeView("c2", "cpu", PowerState.SUSPENDED, since=0.0)
    views = [NodeView("c1", "cpu", ON, busy=True), asleep_c2]
    plan = plan_power("idle-timeout", NOW, views, demand, CFG)
    assert plan.resume == ()
