"""Quota ledger: nominal quota, borrowing and lending in cohorts, flavours, reclaim."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusesched.core.quota import QuotaLedger
from fusesched.core.quota_verdicts import FlavorAssignment, QuotaError
from fusesched.model.job import Placement
from fusesched.model.node import LABEL_GPU_MODEL
from fusesched.model.resources import CPU, GPU, MEMORY, Resources
from fusesched.model.tenancy import TenancyConfig
from fusesched.policies.victims import VictimCandidate, lowest_priority_victims

# A queue spec: (cohort or None, {flavor: {resource: nominal | (nominal, borrow, lend)}})
QuotaSpec = int | tuple[int, int | None, int | None]
QueueSpec = tuple[str | None, Mapping[str, Mapping[str, QuotaSpec]]]

FLAVORS = [
    {"name": "f", "resources": ["gpu"]},
    {"name": "a100", "resources": ["gpu"], "node_labels": {LABEL_GPU_MODEL: "A100"}},
    {"name": "h100", "resources": ["gpu"], "node_labels": {LABEL_GPU_MODEL: "H100"}},
    {"name": "cpu", "resources": ["cpu"]},
]


def config(queues: Mapping[str, QueueSpec], **extra: Any) -> TenancyConfig:
    cohorts = sorted({c for c, _ in queues.values() if c is not None})
    specs = []
    for name, (cohort, flavors) in queues.items():
        fl = []
        for flavor, resources in flavors.items():
            rq: dict[str, Any] = {}
            for res, q in resources.items():
                if isinstance(q, int):
                    rq[res] = {"nominal": q}
                else:
                    rq[res] = {"nominal": q[0], "borrowing_limit": q[1], "lending_limit": q[2]}
            fl.append({"name": flavor, "resources": rq})
        specs.append({"name": name, "cohort": cohort, "flavors": fl})
    return TenancyConfig.from_dict(
        {
            "flavors": FLAVORS,
            "cohorts": cohorts,
            "organisations": [{"name": "o", "tenants": [{"name": "t", "queues": specs}]}],
            **extra,
        }
    )


def gpus(n: int) -> Resources:
    return Resources({GPU: n})


def occupy(ledger: QuotaLedger, queue: str, amounts: list[int], prefix: str = "") -> list[str]:
    ids = []
    for i, n in enumerate(amounts):
        verdict = ledger.check(queue, gpus(n))
        assert verdict.ok, verdict.reason
        assert verdict.assignment is not None
        job = f"{prefix or queue}-{i}"
        ledger.admit(job, verdict.assignment)
        ids.append(job)
    return ids


# ----------------------------------------------------------------------------- admission table

TWO = {"a": ("c", {"f": {"gpu": 4}}), "b": ("c", {"f": {"gpu": 4}})}


@pytest.mark.parametrize(
    ("queues", "used", "queue", "demand", "ok", "borrowed"),
    [
        # no cohort: nominal is the limit
        ({"a": (None, {"f": {"gpu": 4}})}, {}, "a", 4, True, 0),
        ({"a": (None, {"f": {"gpu": 4}})}, {}, "a", 5, False, 0),
        ({"a": (None, {"f": {"gpu": 0}})}, {}, "a", 1, False, 0),
        # cohort: borrow the other's unused nominal quota
        (TWO, {}, "a", 6, True, 2),
        (TWO, {}, "a", 8, True, 4),
        (TWO, {}, "a", 9, False, 0),
        (TWO, {"b": [3]}, "a", 5, True, 1),
        (TWO, {"b": [3]}, "a", 6, False, 0),
        # b borrowed 2 from a: a has 2 left until it reclaims
        (TWO, {"b": [6]}, "a", 2, True, 0),
        (TWO, {"b": [6]}, "a", 3, False, 0),
        # borrowing limit
        ({"a": ("c", {"f": {"gpu": (4, 1, None)}}), "b": TWO["b"]}, {}, "a", 5, True, 1),
        ({"a": ("c", {"f": {"gpu": (4, 1, None)}}), "b": TWO["b"]}, {}, "a", 6, False, 0),
        ({"a": ("c", {"f": {"gpu": (4, 0, None)}}), "b": TWO["b"]}, {}, "a", 5, False, 0),
        # lending limit: b lends at most 1
        ({"a": TWO["a"], "b": ("c", {"f": {"gpu": (4, None, 1)}})}, {}, "a", 5, True, 1),
        ({"a": TWO["a"], "b": ("c", {"f": {"gpu": (4, None, 1)}})}, {}, "a", 6, False, 0),
        # b lent its 1 to a and uses 3 itself: its guaranteed 3 stays usable
        ({"a": TWO["a"], "b": ("c", {"f": {"gpu": (4, None, 1)}})}, {"a": [5]}, "b", 3, True, 0),
        ({"a": TWO["a"], "b": ("c", {"f": {"gpu": (4, None, 1)}})}, {"a": [5]}, "b", 4, False, 0),
        # a queue with no quota of its own borrows from two lenders
        (
            {
                "a": ("c", {"f": {"gpu": 0}}),
                "b": ("c", {"f": {"gpu": 4}}),
                "x": ("c", {"f": {"gpu": (4, None, 2)}}),
            },
            {},
            "a",
            6,
            True,
            6,
        ),
        (
            {
                "a": ("c", {"f": {"gpu": 0}}),
                "b": ("c", {"f": {"gpu": 4}}),
                "x": ("c", {"f": {"gpu": (4, None, 2)}}),
            },
            {},
            "a",
            7,
            False,
            0,
        ),
        # queues in another cohort do not lend
        ({"a": ("c", {"f": {"gpu": 4}}), "b": ("d", {"f": {"gpu": 4}})}, {}, "a", 5, False, 0),
    ],
)
def test_admission_table(
    queues: Mapping[str, QueueSpec],
    used: Mapping[str, list[int]],
    queue: str,
    demand: int,
    ok: bool,
    borrowed: int,
) -> None:
    ledger = QuotaLedger(config(queues))
    for q, amounts in used.items():
        occupy(ledger, q, amounts)
    verdict = ledger.check(queue, gpus(demand))
    assert verdict.ok is ok, verdict.reason
    assert sum(verdict.borrowed.values()) == borrowed
    assert verdict.borrowing is (borrowed > 0)
    if ok:
        assert verdict.assignment is not None
        ledger.admit("new", verdict.assignment)
        assert sum(ledger.borrowed(queue).values()) >= borrowed
    else:
        assert "needs" in verdict.reason
    assert ledger.violations() == []


def test_no_borrowing_for_non_preemptible() -> None:
    ledger = QuotaLedger(config(TWO))
    assert ledger.check("a", gpus(4), may_borrow=False).ok
    verdict = ledger.check("a", gpus(5), may_borrow=False)
    assert not verdict.ok and "needs 5, 4 free" in verdict.reason


def test_usage_views_and_release() -> None:
    ledger = QuotaLedger(config(TWO))
    (job,) = occupy(ledger, "a", [6])
    assert ledger.usage("a") == {("f", GPU): 6}
    assert ledger.nominal("a") == {("f", GPU): 4}
    assert ledger.borrowed("a") == {("f", GPU): 2}
    assert ledger.available("b") == {("f", GPU): 2}
    assert ledger.jobs[job].amounts == {("f", GPU): 6}
    assert ledger.release(job)
    assert not ledger.release(job)  # idempotent
    assert ledger.available("b") == {("f", GPU): 8}
    assert ledger.violations() == []


def test_admit_rejects_misfits_and_duplicates() -> None:
    ledger = QuotaLedger(config(TWO))
    too_big = FlavorAssignment("a", {("f", GPU): 9})
    with pytest.raises(QuotaError, match="does not fit"):
        ledger.admit("j", too_big)
    assert ledger.usage("a") == {("f", GPU): 0}
    ledger.admit("j", FlavorAssignment("a", {("f", GPU): 1}))
    with pytest.raises(QuotaError, match="already admitted"):
        ledger.admit("j", FlavorAssignment("a", {("f", GPU): 1}))
    with pytest.raises(QuotaError, match="unknown queue"):
        ledger.check("zzz", gpus(1))
    with pytest.raises(QuotaError, match="is for queue"):
        ledger.check("b", FlavorAssignment("a", {("f", GPU): 1}))
    verdict = ledger.check("a", FlavorAssignment("a", {("h100", GPU): 1}))
    assert not verdict.ok and "no quota" in verdict.reason
    ledger.admit("forced", too_big, check=False)
    assert ledger.violations()  # forcing past the cap is visible
    with pytest.raises(QuotaError, match="invariants"):
        ledger.check_invariants()


# ----------------------------------------------------------------------------- flavours

GPU_QUEUE = {
    "q": (None, {"a100": {"gpu": 2}, "h100": {"gpu": 4}, "cpu": {"cpu": 8}})
}  # 8 cores = 8000m


def test_first_flavor_that_fits() -> None:
    ledger = QuotaLedger(config(GPU_QUEUE))
    first = ledger.check("q", gpus(2))
    assert first.ok and first.assignment is not None
    assert first.assignment.flavors == {GPU: "a100"}
    ledger.admit("j1", first.assignment)
    second = ledger.check("q", gpus(3))
    assert second.ok and second.assignment is not None
    assert second.assignment.flavors == {GPU: "h100"}
    verdict = ledger.check("q", gpus(5))
    assert not verdict.ok
    assert "a100: nvidia.com/gpu needs 5, 0 free" in verdict.reason
    assert "h100: nvidia.com/gpu needs 5, 4 free" in verdict.reason
    assert verdict.assignment == FlavorAssignment("q", {("a100", GPU): 5})  # preferred target


def test_flavor_follows_job_constraints_and_nodes() -> None:
    ledger = QuotaLedger(config(GPU_QUEUE))
    wants_h100 = Placement(node_selector={LABEL_GPU_MODEL: "H100"})
    verdict = ledger.check("q", gpus(1), placement=wants_h100)
    assert verdict.ok and verdict.assignment is not None
    assert verdict.assignment.flavors == {GPU: "h100"}
    only_h100_nodes = [{LABEL_GPU_MODEL: "H100"}]
    verdict = ledger.check("q", gpus(1), node_labels=only_h100_nodes)
    assert verdict.ok and verdict.assignment is not None
    assert verdict.assignment.flavors == {GPU: "h100"}
    assert ledger.flavor_of("q", gpus(9)) == FlavorAssignment("q", {("a100", GPU): 9})
    wants_v100 = Placement(node_selector={LABEL_GPU_MODEL: "V100"})
    assert ledger.flavor_of("q", gpus(1), wants_v100) is None
    verdict = ledger.check("q", gpus(1), placement=wants_v100)
    assert not verdict.ok and verdict.assignment is None
    assert "excluded by the job's node constraints" in verdict.reason


def test_resource_groups_and_unmanaged_resources() -> None:
    ledger = QuotaLedger(config(GPU_QUEUE))
    demand = Resources({GPU: 1, CPU: 4000, MEMORY: 2**30})
    verdict = ledger.check("q", demand)
    assert verdict.ok and verdict.assignment is not None
    assert verdict.assignment.amounts == {("a100", GPU): 1, ("cpu", CPU): 4000}
    assert verdict.assignment.unmanaged == Resources({MEMORY: 2**30})
    assert not ledger.check("q", Resources({GPU: 1, CPU: 9000})).ok
    strict = QuotaLedger(config(GPU_QUEUE, strict_resources=True))
    verdict = strict.check("q", demand)
    assert not verdict.ok and "no quota for memory" in verdict.reason


def test_qos_per_user_limits() -> None:
    qos = {
        "gold": {"priority": 10, "preemptible": False},
        "bronze": {"priority": 1, "max_jobs_per_user": 1, "max_gpus_per_user": 3},
    }
    ledger = QuotaLedger(config({"q": (None, {"f": {"gpu": 10}})}, qos=qos, default_qos="gold"))
    first = ledger.check("q", gpus(2), user="u", qos="bronze")
    assert first.ok and first.assignment is not None
    ledger.admit("j1", first.assignment, user="u", qos="bronze")
    verdict = ledger.check("q", gpus(1), user="u", qos="bronze")
    assert not verdict.ok and "limit 1" in verdict.reason
    assert ledger.check("q", gpus(1), user="v", qos="bronze").ok
    assert not ledger.check("q", gpus(4), user="v", qos="bronze").ok  # > 3 GPUs
    assert ledger.check("q", gpus(4), user="u", qos="gold").ok
    ledger.release("j1")
    assert ledger.check("q", gpus(3), user="u", qos="bronze").ok


# ----------------------------------------------------------------------------- reclaim


def running(*specs: tuple[str, float, float | None]) -> list[VictimCandidate]:
    return [VictimCandidate(job, start, ckpt) for job, start, ckpt in specs]


def test_reclaim_prefers_least_lost_work() -> None:
    ledger = QuotaLedger(config(TWO))
    occupy(ledger, "b", [2, 2, 2, 2])  # b borrows 4 of a's nominal quota
    cands = running(("b-0", 0, None), ("b-1", 0, 90), ("b-2", 50, None), ("b-3", 0, 10))
    assert not ledger.check("a", gpus(2)).ok
    assert ledger.reclaim_candidates("a", gpus(2), cands, now=100) == ["b-1"]
    assert ledger.reclaim_candidates("a", gpus(4), cands, now=100) == ["b-1", "b-2"]
    order = lowest_priority_victims
    assert ledger.reclaim_candidates("a", gpus(2), cands, now=100, order=order) == ["b-2"]
    for victim in ledger.reclaim_candidates("a", gpus(4), cands, now=100):
        ledger.release(victim)
    assert ledger.check("a", gpus(4)).ok


def test_reclaim_picks_borrowers_only() -> None:
    queues = {
        "a": ("c", {"f": {"gpu": 4}}),
        "b": ("c", {"f": {"gpu": 2}}),
        "x": ("c", {"f": {"gpu": 4}}),
    }
    ledger = QuotaLedger(config(queues))
    occupy(ledger, "x", [4])  # at nominal: not borrowing
    occupy(ledger, "b", [2, 2, 2])  # borrows 4 (a's)
    cands = running(("x-0", 99, None), ("b-0", 0, None), ("b-1", 10, None), ("b-2", 20, None))
    victims = ledger.reclaim_candidates("a", gpus(3), cands, now=100)
    assert victims == ["b-2", "b-1"]
    assert all(v.startswith("b-") for v in victims)


def test_reclaim_stops_when_the_borrower_is_back_within_nominal() -> None:
    ledger = QuotaLedger(config(TWO))
    occupy(ledger, "b", [4, 2])  # b borrows 2
    cands = running(("b-0", 99, None), ("b-1", 0, None))
    # b-0 loses least work, but after the first victim b no longer borrows
    assert ledger.reclaim_candidates("a", gpus(4), cands, now=100) == ["b-0"]
    ledger.release("b-0")
    assert ledger.check("a", gpus(4)).ok


def test_reclaim_gives_back_unneeded_victims() -> None:
    queues = {"a": ("c", {"f": {"gpu": 4}}), "b": ("c", {"f": {"gpu": 0}})}
    ledger = QuotaLedger(config(queues))
    occupy(ledger, "b", [1, 3])
    cands = running(("b-0", 90, None), ("b-1", 0, None))  # b-0 (1 GPU) comes first
    assert ledger.reclaim_candidates("a", gpus(3), cands, now=100) == ["b-1"]


@pytest.mark.parametrize(
    ("demand", "cands"),
    [
        (5, running(("b-0", 0, None))),  # beyond a's nominal: reclaim never lends
        (1, running(("b-0", 0, None))),  # fits already
        (4, []),  # nothing running is known
        (4, [VictimCandidate("b-0", 0, preemptible=False)]),
    ],
)
def test_reclaim_returns_nothing(demand: int, cands: list[VictimCandidate]) -> None:
    ledger = QuotaLedger(config(TWO))
    occupy(ledger, "b", [6])
    assert ledger.reclaim_candidates("a", gpus(demand), cands, now=10) == []


# ----------------------------------------------------------------------------- properties

quota = st.tuples(
    st.integers(0, 8),
    st.one_of(st.none(), st.integers(0, 6)),
    st.one_of(st.none(), st.integers(0, 8)),
)


@st.composite
def cohorts(draw: st.DrawFn) -> TenancyConfig:
    n = draw(st.integers(1, 4))
    queues: dict[str, QueueSpec] = {}
    for i in range(n):
        nominal, borrow, lend = draw(quota)
        lend = None if lend is None else min(lend, nominal)
        in_cohort = draw(st.booleans()) or i < 2
        if not in_cohort:
            borrow = lend = None
        queues[f"q{i}"] = ("c" if in_cohort else None, {"f": {"gpu": (nominal, borrow, lend)}})
    return config(queues)


ops = st.lists(
    st.tuples(st.sampled_from(["admit", "release"]), st.integers(0, 3), st.integers(1, 6)),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(cohorts(), ops)
def test_limits_hold_under_any_sequence(
    cfg: TenancyConfig, steps: list[tuple[str, int, int]]
) -> None:
    ledger = QuotaLedger(cfg)
    names = [q.name for q in cfg.queues]
    quotas = {q.name: q.quotas[0].resources[GPU] for q in cfg.queues}
    col = ("f", GPU)
    live: list[str] = []
    for step, (op, qi, amount) in enumerate(steps):
        queue = names[qi % len(names)]
        if op == "admit":
            verdict = ledger.check(queue, gpus(amount))
            if verdict.ok:
                assert verdict.assignment is not None
                ledger.admit(f"j{step}", verdict.assignment)
                live.append(f"j{step}")
        elif live:
            assert ledger.release(live.pop(amount % len(live)))
        assert ledger.violations() == []
        for name in names:
            q, used = quotas[name], ledger.usage(name)[col]
            cohort = cfg.queue(name).cohort
            borrow = 10**9 if q.borrowing_limit is None else q.borrowing_limit
            limit = q.nominal if cohort is None else q.nominal + borrow
            assert used <= limit
            # a lender can always use its never-lent part at once
            assert ledger.available(name)[col] >= max(0, q.guaranteed - used)
        members = [n for n in names if cfg.queue(n).cohort == "c"]
        drawn = sum(max(0, ledger.usage(n)[col] - quotas[n].guaranteed) for n in members)
        assert drawn <= sum(quotas[n].lendable for n in members)


@settings(max_examples=300, deadline=None)
@given(cohorts(), st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), max_size=20), st.data())
def test_reclaim_returns_enough_from_borrowers_only(
    cfg: TenancyConfig, fills: list[tuple[int, int]], data: st.DataObject
) -> None:
    ledger = QuotaLedger(cfg)
    names = [q.name for q in cfg.queues]
    col = ("f", GPU)
    owner: dict[str, str] = {}
    for k, (qi, amount) in enumerate(fills):
        queue = names[qi % len(names)]
        verdict = ledger.check(queue, gpus(amount))
        if verdict.ok and verdict.assignment is not None:
            ledger.admit(f"j{k}", verdict.assignment)
            owner[f"j{k}"] = queue
    lender = data.draw(st.sampled_from(names))
    room = ledger.nominal(lender)[col] - ledger.usage(lender)[col]
    if room <= 0:
        return
    demand = data.draw(st.integers(1, room))
    cands = [VictimCandidate(j, float(i), None) for i, j in enumerate(owner)]
    borrowing = {n for n in names if ledger.borrowed(n)}
    victims = ledger.reclaim_candidates(lender, gpus(demand), cands, now=1000.0)
    if ledger.check(lender, gpus(demand)).ok:
        assert victims == []
        return
    assert victims, "with every job preemptible, nominal quota is always reclaimable"
    assert all(owner[v] != lender and owner[v] in borrowing for v in victims)
    for v in victims:
        ledger.release(v)
    assert ledger.check(lender, gpus(demand)).ok


def test_reclaim_rejects_foreign_assignments() -> None:
    ledger = QuotaLedger(config(TWO))
    with pytest.raises(QuotaError, match="does not match"):
        ledger.reclaim_candidates("a", FlavorAssignment("a", {("h100", GPU): 1}), [], now=0)
    with pytest.raises(QuotaError, match="does not match"):
        ledger.reclaim_candidates("a", FlavorAssignment("b", {("f", GPU): 1}), [], now=0)
