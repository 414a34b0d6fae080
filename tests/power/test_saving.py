"""The pure power-saving policy: suspend/resume decisions, table-tested."""

from __future__ import annotations

import pytest

from fusesched.power.saving import (
    SAVING_POLICIES,
    NodeView,
    PoolDemand,
    PowerState,
    RateHistory,
    SavingConfig,
    get_policy,
    plan_power,
)

ON, OFF, BOOT = PowerState.ON, PowerState.SUSPENDED, PowerState.RESUMING
NOW = 10_000.0


def idle(name: str, since: float, pool: str = "a") -> NodeView:
    return NodeView(name, pool, ON, busy=False, since=since)


def busy(name: str, pool: str = "a") -> NodeView:
    return NodeView(name, pool, ON, busy=True, since=0.0)


def asleep(name: str, since: float = 0.0, pool: str = "a") -> NodeView:
    return NodeView(name, pool, OFF, since=since)


def booting(name: str, since: float, pool: str = "a") -> NodeView:
    return NodeView(name, pool, BOOT, since=since)


CFG = SavingConfig(idle_threshold_s=1800, forecast_min_idle_s=300, resume_timeout_s=600)

CASES = [
    # (id, policy, nodes, demand, config, suspend, resume, failed)
    (
        "threshold: only nodes idle >= T are suspended, longest idle first",
        "idle-timeout",
        [idle("n1", NOW - 1799), idle("n2", NOW - 1800), idle("n3", NOW - 5000), busy("n4")],
        {},
        CFG,
        ("n3", "n2"),
        (),
        (),
    ),
    (
        "always-on never suspends and resumes what sleeps",
        "always-on",
        [idle("n1", 0.0), asleep("n2")],
        {},
        CFG,
        (),
        ("n2",),
        (),
    ),
    (
        "idle-timeout resumes only for waiting jobs: 2.5 nodes waiting, 1 idle -> 2 resumed",
        "idle-timeout",
        [busy("n1"), idle("n2", NOW - 10), asleep("n3", 5), asleep("n4", 1), asleep("n5", 9)],
        {"a": PoolDemand(queued_nodes=2.5)},
        CFG,
        (),
        ("n4", "n3"),
        (),
    ),
    (
        "idle-timeout: nothing waits, nothing resumed",
        "idle-timeout",
        [busy("n1"), asleep("n3")],
        {"a": PoolDemand(queued_nodes=0.0)},
        CFG,
        (),
        (),
        (),
    ),
    (
        "idle nodes wanted by waiting jobs are not suspended",
        "idle-timeout",
        [idle("n1", 0.0), idle("n2", 0.0), idle("n3", 0.0)],
        {"a": PoolDemand(queued_nodes=2.0)},
        CFG,
        ("n1",),
        (),
        (),
    ),
    (
        "rate limit: 3 per minute, 2 used in the last minute -> 1 more",
        "idle-timeout",
        [idle("n1", 0.0), idle("n2", 1.0), idle("n3", 2.0)],
        {},
        SavingConfig(idle_threshold_s=1800, max_suspends_per_min=3),
        ("n1",),
        (),
        (),
    ),
    (
        "warm reserve per pool: pool a keeps 2 idle, pool b (default 0) none",
        "idle-timeout",
        [
            idle("a1", 0.0),
            idle("a2", 1.0),
            idle("a3", 2.0),
            idle("b1", 0.0, pool="b"),
        ],
        {},
        SavingConfig(idle_threshold_s=1800, min_warm={"a": 2}),
        ("a1", "b1"),
        (),
        (),
    ),
    (
        "exclusions by node and by pool",
        "idle-timeout",
        [idle("a1", 0.0), idle("a2", 0.0), idle("b1", 0.0, pool="b")],
        {},
        SavingConfig(exclude_nodes=frozenset({"a1"}), exclude_pools=frozenset({"b"})),
        ("a2",),
        (),
        (),
    ),
    (
        "resume timeout marks the node failed; it no longer counts as awake",
        "idle-timeout",
        [booting("n1", NOW - 601), booting("n2", NOW - 600), asleep("n3")],
        {"a": PoolDemand(queued_nodes=2.0)},
        CFG,
        (),
        ("n3",),
        ("n1",),
    ),
    (
        "forecast: keeps awake what it predicts (3), suspends the rest after 300 s idle",
        "forecast",
        [busy("n1"), idle("n2", NOW - 400), idle("n3", NOW - 500), idle("n4", NOW - 100)],
        {"a": PoolDemand(queued_nodes=0.0, forecast_nodes=2.2)},
        CFG,
        ("n3",),
        (),
        (),
    ),
    (
        "forecast: nodes needed again within the keep look-ahead stay on (no resume for it)",
        "forecast",
        [busy("n1"), idle("n2", NOW - 400), idle("n3", NOW - 500), asleep("n4")],
        {"a": PoolDemand(forecast_nodes=1.0, forecast_keep_nodes=2.5)},
        CFG,
        (),
        (),
        (),
    ),
    (
        "forecast: wakes nodes before demand arrives",
        "forecast",
        [busy("n1"), asleep("n2", 3), asleep("n3", 2), asleep("n4", 1)],
        {"a": PoolDemand(queued_nodes=0.0, forecast_nodes=3.0)},
        CFG,
        (),
        ("n4", "n3"),
        (),
    ),
    (
        "forecast without a forecast yet acts on what waits",
        "forecast",
        [busy("n1"), idle("n2", 0.0), asleep("n3")],
        {"a": PoolDemand(queued_nodes=0.0)},
        CFG,
        ("n2",),
        (),
        (),
    ),
    (
        "resume rate limit",
        "forecast",
        [asleep("n1", 1), asleep("n2", 2), asleep("n3", 3)],
        {"a": PoolDemand(forecast_nodes=3.0)},
        SavingConfig(max_resumes_per_min=2),
        (),
        ("n1", "n2"),
        (),
    ),
    (
        "nodes the scheduler does not use are never suspended",
        "idle-timeout",
        [NodeView("n1", "a", ON, since=0.0, schedulable=False), idle("n2", 0.0)],
        {},
        CFG,
        ("n2",),
        (),
        (),
    ),
]


@pytest.mark.parametrize(
    ("policy", "nodes", "demand", "config", "suspend", "resume", "failed"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_decisions(
    policy: str,
    nodes: list[NodeView],
    demand: dict[str, PoolDemand],
    config: SavingConfig,
    suspend: tuple[str, ...],
    resume: tuple[str, ...],
    failed: tuple[str, ...],
) -> None:
    history = RateHistory(suspends=(NOW - 59.0, NOW - 30.0), resumes=())
    plan = plan_power(policy, NOW, nodes, demand, config, history)
    assert plan.suspend == suspend
    assert plan.resume == resume
    assert plan.failed == failed
    # pure: the same inputs give the same plan
    assert plan_power(policy, NOW, nodes, demand, config, history) == plan


def test_history_forgets_after_a_minute_and_records_actions() -> None:
    cfg = SavingConfig(max_suspends_per_min=1)
    nodes = [idle("n1", 0.0), idle("n2", 0.0)]
    first = plan_power("idle-timeout", NOW, nodes, {}, cfg)
    assert first.suspend == ("n1",) and first.history.suspends == (NOW,)
    blocked = plan_power("idle-timeout", NOW + 59, nodes[1:], {}, cfg, first.history)
    assert blocked.suspend == ()
    later = plan_power("idle-timeout", NOW + 61, nodes[1:], {}, cfg, first.history)
    assert later.suspend == ("n2",)


def test_registry_and_config_validation() -> None:
    policies = {"always-on", "idle-timeout", "forecast", "predictive", "surge", "surge-room"}
    assert set(SAVING_POLICIES) == policies
    with pytest.raises(ValueError, match="unknown power-saving policy"):
        get_policy("solar")
    with pytest.raises(ValueError):
        SavingConfig(idle_threshold_s=-1)
    with pytest.raises(ValueError):
        SavingConfig(min_warm={"a": -1})
    assert SavingConfig(min_warm={"a": 2}, default_min_warm=1).reserve("b") == 1


def test_unfit_idle_nodes_are_not_kept_for_a_job_no_node_can_be_woken_for() -> None:
    """Idle nodes no waiting job can run are kept awake beside the node it needs only while
    that node can be woken: with it excluded (SuspendExcNodes), they go as before."""
    nodes = [idle("n1", 0.0), idle("n2", 10.0), idle("n3", 20.0), asleep("n4")]
    demand = {
        "a": PoolDemand(queued_nodes=1.0, wake_first=("n4",), unfit_powered=("n1", "n2", "n3"))
    }
    plan = plan_power("idle-timeout", NOW, nodes, demand, CFG)
    assert (plan.resume, plan.suspend) == (("n4",), ())  # (the job's node: woken)
    excluded = SavingConfig(idle_threshold_s=1800, exclude_nodes=frozenset({"n4"}))
    plan = plan_power("idle-timeout", NOW, nodes, demand, excluded)
    assert (plan.resume, plan.suspend) == ((), ("n1", "n2"))  # (one kept for the waiting job)
