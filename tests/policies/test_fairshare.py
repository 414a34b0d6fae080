"""Fair share (decayed usage, Fair Tree), multifactor priority and the victim order."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import job
from fusesched.model.resources import CPU, GPU, Resources
from fusesched.model.tenancy import DEFAULT_QOS, EXAMPLE_YAML, TenancyConfig
from fusesched.policies.fairshare import (
    Account,
    UsageTracker,
    account_shares,
    fair_tree,
    fairshare_factors,
)
from fusesched.policies.priority import MultifactorPriority, PriorityWeights
from fusesched.policies.victims import (
    VICTIM_ORDERS,
    VictimCandidate,
    checkpoint_aware_victims,
    eligible_victims,
)

HOUR = 3600.0

# ----------------------------------------------------------------------------- usage decay


def test_usage_halves_after_one_half_life() -> None:
    tracker = UsageTracker(half_life_s=HOUR)
    tracker.charge(("o", "t", "q", "u"), 100.0, now=0.0)
    assert tracker.usage_at(("o", "t", "q", "u"), 0.0) == 100.0
    assert tracker.usage_at(("o", "t", "q", "u"), HOUR) == pytest.approx(50.0)
    assert tracker.usage_at(("o", "t", "q", "u"), 2 * HOUR) == pytest.approx(25.0)
    assert tracker.usage_at(("o", "t"), HOUR) == pytest.approx(50.0)  # ancestors charged too
    assert tracker.usage_at((), HOUR) == pytest.approx(50.0)
    assert tracker.usage_at(("nobody",), HOUR) == 0.0


def test_incremental_charges_sum_decayed() -> None:
    tracker = UsageTracker(half_life_s=HOUR)
    tracker.charge(("o", "a"), 100.0, now=0.0)
    tracker.charge(("o", "a"), 10.0, now=HOUR)
    tracker.charge(("o", "b"), 40.0, now=HOUR)
    assert tracker.usage_at(("o", "a"), HOUR) == pytest.approx(60.0)
    assert tracker.usage_at(("o",), 2 * HOUR) == pytest.approx(50.0)  # (60 + 40) / 2
    assert tracker.accounts() == [(), ("o",), ("o", "a"), ("o", "b")]
    with pytest.raises(ValueError, match="backwards"):
        tracker.charge(("o", "a"), 1.0, now=0.0)
    with pytest.raises(ValueError, match="non-negative"):
        tracker.charge(("o", "a"), -1.0, now=2 * HOUR)


@settings(max_examples=50, deadline=None)
@given(st.floats(1.0, 1e5), st.floats(0.0, 5.0), st.floats(0.0, 10.0))
def test_interval_charge_is_the_decayed_integral(
    half_life: float, lives: float, rate: float
) -> None:
    span = lives * half_life
    tracker = UsageTracker(half_life)
    tracker.charge_interval(("a",), rate, 0.0, span)
    steps = 4000
    dt = span / steps
    mids = (np.arange(steps) + 0.5) * dt
    numeric = float(np.sum(rate * dt * 0.5 ** ((span - mids) / half_life)))
    assert tracker.usage_at(("a",), span) == pytest.approx(numeric, rel=1e-5, abs=1e-9)


@settings(max_examples=50, deadline=None)
@given(st.floats(1.0, 1e5), st.floats(0.0, 1e6), st.floats(0.0, 1e6), st.floats(0.0, 10.0))
def test_interval_charges_split_additively(
    half_life: float, a: float, b: float, rate: float
) -> None:
    whole, split = UsageTracker(half_life), UsageTracker(half_life)
    whole.charge_interval(("a",), rate, 0.0, a + b)
    split.charge_interval(("a",), rate, 0.0, a)
    split.charge_interval(("a",), rate, a, a + b)
    end = a + b
    assert split.usage_at(("a",), end) == pytest.approx(whole.usage_at(("a",), end), rel=1e-9)


def test_no_decay_with_infinite_half_life() -> None:
    tracker = UsageTracker(math.inf)
    tracker.charge_interval(("a",), 2.0, 0.0, 10.0)
    assert tracker.usage_at(("a",), 1e9) == 20.0
    with pytest.raises(ValueError, match="positive"):
        UsageTracker(0)


# ----------------------------------------------------------------------------- Fair Tree


def test_equal_shares_lighter_tenant_ranks_first() -> None:
    shares: dict[Account, float] = {("o", "light", "q", "u1"): 1.0, ("o", "heavy", "q", "u2"): 1.0}
    usage: dict[Account, float] = {("o", "light"): 10.0, ("o", "heavy"): 90.0}
    usage |= {("o", "light", "q"): 10.0, ("o", "heavy", "q"): 90.0}
    usage |= {("o", "light", "q", "u1"): 10.0, ("o", "heavy", "q", "u2"): 90.0}
    result = fair_tree(shares, usage)
    assert result.order() == [("o", "light", "q", "u1"), ("o", "heavy", "q", "u2")]
    assert result.factor(("o", "light", "q", "u1")) == 1.0
    assert result.factor(("o", "heavy", "q", "u2")) == 0.5
    entry = result.entries[("o", "light")]
    assert entry.norm_shares == 0.5 and entry.norm_usage == 0.1 and entry.level_fs == 5.0


def test_hierarchy_every_user_of_the_better_account_ranks_above() -> None:
    # Tenant A used less than its share overall, though its user a1 is heavy;
    # tenant B used more, though its users are individually light.
    shares: dict[Account, float] = {
        ("o", "A", "q", "a1"): 1.0,
        ("o", "A", "q", "a2"): 1.0,
        ("o", "B", "q", "b1"): 1.0,
        ("o", "B", "q", "b2"): 1.0,
        ("o", "B", "q", "b3"): 1.0,
    }
    leaf = {"a1": 30.0, "a2": 0.0, "b1": 12.0, "b2": 12.0, "b3": 16.0}
    tracker = UsageTracker(HOUR)
    for account in shares:
        tracker.charge(account, leaf[account[-1]], now=0.0)
    result = fair_tree(shares, lambda a: tracker.usage_at(a, 0.0))
    order = [a[-1] for a in result.order()]
    assert order[:2] == ["a2", "a1"] and set(order[2:]) == {"b1", "b2", "b3"}
    assert result.factor(("o", "A", "q", "a1")) > result.factor(("o", "B", "q", "b1"))
    # b1 and b2 tie: same position, same factor
    assert result.factor(("o", "B", "q", "b1")) == result.factor(("o", "B", "q", "b2"))
    assert result.factor(("o", "B", "q", "b3")) == pytest.approx(1 / 5)
    assert result.ranked == 5


def test_shares_weigh_usage() -> None:
    # big has 3 shares and used twice as much as small: still under its share, so first
    shares: dict[Account, float] = {("big",): 3.0, ("small",): 1.0}
    result = fair_tree(shares, {("big",): 2.0, ("small",): 1.0})
    assert result.order() == [("big",), ("small",)]


def test_unused_accounts_tie_at_the_top_and_factors_in_range() -> None:
    shares: dict[Account, float] = {(f"u{i}",): 1.0 for i in range(4)}
    result = fair_tree(shares, {("u0",): 5.0, ("u1",): 1.0})
    assert result.factor(("u2",)) == result.factor(("u3",)) == 1.0
    assert result.factor(("u1",)) == 0.5  # positions 1, 1, 3, 4
    assert result.factor(("u0",)) == 0.25
    assert all(0 < e.factor <= 1 for e in result.entries.values() if e.factor is not None)
    with pytest.raises(KeyError):
        result.factor(("zz",))
    with pytest.raises(ValueError, match="positive"):
        fair_tree({("a",): 0.0}, {})


def test_tied_accounts_merge_their_children() -> None:
    # X and Y have equal level fair share, so their users are sorted together.
    shares: dict[Account, float] = {("X", "x1"): 1.0, ("X", "x2"): 1.0, ("Y", "y1"): 1.0}
    usage: dict[Account, float] = {
        ("X",): 10.0,
        ("Y",): 10.0,
        ("X", "x1"): 9.0,
        ("X", "x2"): 1.0,
        ("Y", "y1"): 10.0,
    }
    order = [a[-1] for a in fair_tree(shares, usage).order()]
    assert order == ["x2", "y1", "x1"]  # LF: x2 = 5, y1 = 1, x1 ≈ 0.56


def test_fairshare_factors_from_config() -> None:
    cfg = TenancyConfig.from_yaml(EXAMPLE_YAML)
    tree = account_shares(cfg, [("inference", "dave")])
    assert tree[("acme", "research")] == 3.0
    assert tree[("acme", "research", "ml-train", "alice")] == 2.0
    assert tree[("acme", "production", "inference", "dave")] == 1.0
    tracker = UsageTracker(7 * 86400.0)
    tracker.charge(cfg.account_path("ml-train", "alice"), 1000.0, now=0.0)
    tracker.charge(cfg.account_path("inference", "erin"), 10.0, now=0.0)
    result = fairshare_factors(cfg, tracker, now=100.0, users=[("inference", "dave")])
    users = [a[-1] for a in result.order()]
    # research (3 shares) used ~99%: production's users come first; bob (no usage) before alice
    assert users == ["dave", "erin", "bob", "alice"]


# ----------------------------------------------------------------------------- priority


def test_breakdown_sums_to_total_and_explains() -> None:
    prio = MultifactorPriority(PriorityWeights(age=100, fairshare=1000, size=10, qos=500, user=1))
    spec = job("j1").tasks(2, cpu=8, gpu=2).at(0).qos("gold").priority(500).build()
    capacity = Resources({CPU: 64_000, GPU: 8})
    bd = prio.breakdown(spec, now=3.5 * 86400, fairshare=0.25, capacity=capacity)
    assert bd.factor("age").value == pytest.approx(0.5)
    assert bd.factor("fairshare").contribution == 250.0
    assert bd.factor("size").value == 0.5  # 4 of 8 GPUs
    assert bd.factor("qos").value == 1.0
    assert bd.factor("user").value == 0.75
    assert bd.total == pytest.approx(sum(f.contribution for f in bd.factors))
    assert bd.total == pytest.approx(50 + 250 + 5 + 500 + 0.75)
    text = bd.explain()
    for name in ("age", "fairshare", "size", "qos", "user", "total"):
        assert name in text
    assert "50.0% of cluster nvidia.com/gpu" in text


@settings(max_examples=50, deadline=None)
@given(
    st.floats(0, 1e7),
    st.floats(0, 1),
    st.integers(0, 16),
    st.sampled_from(["gold", "silver", "bronze"]),
    st.integers(-5000, 5000),
    st.booleans(),
)
def test_vector_totals_match_breakdown(
    waited: float, fs: float, n_gpu: int, qos: str, user: int, small: bool
) -> None:
    prio = MultifactorPriority(favor_small=small)
    builder = job("j").tasks(1, cpu=1, gpu=n_gpu) if n_gpu else job("j").tasks(1, cpu=1)
    spec = builder.at(0).qos(qos).priority(user).build()
    capacity = Resources({CPU: 64_000, GPU: 8})
    bd = prio.breakdown(spec, now=waited, fairshare=fs, capacity=capacity)
    assert all(0.0 <= f.value <= 1.0 for f in bd.factors)
    share = max(n_gpu / 8, 1000 / 64_000)
    total = prio.totals(
        waited_s=np.array([waited]),
        fairshare=np.array([fs]),
        size_share=np.array([share]),
        qos_priority=np.array([float(prio.qos[qos].priority)]),
        user_priority=np.array([float(user)]),
    )
    assert total[0] == pytest.approx(bd.total)


def test_priority_orders_by_factors() -> None:
    prio = MultifactorPriority()
    capacity = Resources({CPU: 64_000})
    light = job("a").tasks(1, cpu=1).at(0).build()
    heavy = job("b").tasks(1, cpu=1).at(0).build()
    a = prio.breakdown(light, 10.0, fairshare=1.0, capacity=capacity)
    b = prio.breakdown(heavy, 10.0, fairshare=0.5, capacity=capacity)
    assert a.total > b.total
    requeued = prio.breakdown(light, 10.0, fairshare=1.0, capacity=capacity, eligible_since=10.0)
    assert requeued.factor("age").value == 0.0
    with pytest.raises(ValueError):
        prio.breakdown(light, 10.0, fairshare=1.5, capacity=capacity)
    with pytest.raises(ValueError):
        PriorityWeights(age=-1)


# ----------------------------------------------------------------------------- victims


def test_checkpoint_aware_order() -> None:
    now = 1000.0
    cands = [
        VictimCandidate("no-ckpt-long", start_time=0.0),  # loses 1000
        VictimCandidate("ckpt-recent", start_time=0.0, last_checkpoint=950.0),  # loses 50
        VictimCandidate("young", start_time=850.0),  # loses 150
        VictimCandidate("old-ckpt", start_time=800.0, last_checkpoint=100.0),  # loses 200
        VictimCandidate("tie-high", start_time=0.0, last_checkpoint=900.0, priority=5.0),
        VictimCandidate("tie-low", start_time=0.0, last_checkpoint=900.0, priority=1.0),
        VictimCandidate("tie-low-new", start_time=10.0, last_checkpoint=900.0, priority=1.0),
    ]
    order = [c.job_id for c in checkpoint_aware_victims(cands, now)]
    assert order == [
        "ckpt-recent",
        "tie-low-new",
        "tie-low",
        "tie-high",
        "young",
        "old-ckpt",
        "no-ckpt-long",
    ]
    assert VictimCandidate("big", 0.0, 900.0, size=8).lost_work(now) == 800.0
    assert set(VICTIM_ORDERS) == {"checkpoint-aware", "fewest-preemptions", "lowest-priority"}
    lowest = [c.job_id for c in VICTIM_ORDERS["lowest-priority"](cands, now)]
    assert lowest[:2] == ["young", "old-ckpt"]  # priority 0, most recent start first


def test_fewest_preemptions_order_spares_a_job_preempted_before() -> None:
    """A job that has just restarted from its checkpoint loses the least work: by least lost
    work alone it is the first victim again; by fewest preemptions, it is spared."""
    now = 1000.0
    cands = [
        VictimCandidate("restarted", start_time=990.0, preemptions=3),  # loses 10
        VictimCandidate("ckpt", start_time=0.0, last_checkpoint=900.0),  # loses 100
        VictimCandidate("long", start_time=0.0),  # loses 1000
    ]
    assert checkpoint_aware_victims(cands, now)[0].job_id == "restarted"
    order = [c.job_id for c in VICTIM_ORDERS["fewest-preemptions"](cands, now)]
    assert order == ["ckpt", "long", "restarted"]


def test_eligible_victims_follow_qos_tiers() -> None:
    cands = [
        VictimCandidate("g", 0.0, qos="gold", preemptible=False),
        VictimCandidate("s", 0.0, qos="silver"),
        VictimCandidate("b", 0.0, qos="bronze"),
        VictimCandidate("b-pinned", 0.0, qos="bronze", preemptible=False),
    ]
    assert [c.job_id for c in eligible_victims("gold", cands, DEFAULT_QOS)] == ["s", "b"]
    assert [c.job_id for c in eligible_victims("silver", cands, DEFAULT_QOS)] == ["b"]
    assert eligible_victims("bronze", cands, DEFAULT_QOS) == []
