"""Tenancy wired into the scheduling core: quota admission, borrowing and reclaim, QoS
preemption, requeue after failures, the multifactor order — and the simulator around it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from builders import job, node
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    AdoptedTask,
    Decision,
    JobAdopted,
    JobCheckpointed,
    JobExited,
    JobSubmitted,
    NodeAdded,
    PreemptJob,
    RejectJob,
    StartJob,
)
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase
from fusesched.model.tenancy import TenancyConfig, TenancyError
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_policy import TenancyPolicy
from fusesched.sim.engine import PREEMPTED_EXIT_CODE, SimJob, Simulation


def tenancy(
    queues: dict[str, tuple[int, int | None, int | None]], cohort: str | None = "c", **extra: Any
) -> TenancyConfig:
    """Queues of one tenant, each with a GPU quota (nominal, borrowing limit, lending limit)."""
    specs = []
    for name, (nominal, borrow, lend) in queues.items():
        q: dict[str, Any] = {"nominal": nominal}
        if borrow is not None:
            q["borrowing_limit"] = borrow
        if lend is not None:
            q["lending_limit"] = lend
        specs.append(
            {
                "name": name,
                "cohort": cohort,
                "flavors": [{"name": "gpu", "resources": {"nvidia.com/gpu": q}}],
            }
        )
    return TenancyConfig.from_dict(
        {
            "flavors": [{"name": "gpu", "resources": ["nvidia.com/gpu"]}],
            "cohorts": [cohort] if cohort else [],
            "organisations": [{"name": "o", "tenants": [{"name": "t", "queues": specs}]}],
            **extra,
        }
    )


def core_with(config: TenancyConfig, gpus: int = 8, nodes: int = 1, **policy: Any) -> SchedulerCore:
    core = SchedulerCore(
        CoreConfig(queue_order="fcfs", backfill="none", tenancy=TenancyPolicy(config, **policy))
    )
    for i in range(nodes):
        core.handle(NodeAdded(node(f"n{i}").cpu(64).gpu(gpus).build()), 0.0)
    return core


def gjob(job_id: str, queue: str, gpus: int, qos: str = "silver", at: float = 0.0) -> JobSpec:
    return job(job_id).tasks(1, cpu=1, gpu=gpus).queue(queue).qos(qos).at(at).build()


def started(decisions: list[Decision]) -> list[str]:
    return [d.job_id for d in decisions if isinstance(d, StartJob)]


def preempted(decisions: list[Decision]) -> list[str]:
    return [d.job_id for d in decisions if isinstance(d, PreemptJob)]


def test_quota_blocks_one_queue_without_blocking_another() -> None:
    core = core_with(tenancy({"a": (2, None, None), "b": (4, None, None)}, cohort=None))
    out = core.step(0, [JobSubmitted(gjob("a1", "a", 2)), JobSubmitted(gjob("a2", "a", 2))])
    assert started(out) == ["a1"]  # a2 exceeds a's quota of 2 GPUs
    out = core.step(1, [JobSubmitted(gjob("b1", "b", 4))])
    assert started(out) == ["b1"]  # not stuck behind a2
    assert core.jobs["a2"].phase is JobPhase.QUEUED
    out = core.step(2, [JobExited("a1")])
    assert started(out) == ["a2"]


def test_a_guarantee_does_not_wait_behind_another_queues_head() -> None:
    """Nominal quotas of 8 GPUs each on an 8-GPU node. a1 takes 6; a2 (4 more: a borrows)
    is blocked by room and heads the queue. b1 fits in b's own quota and in the free room:
    it starts at once (per-queue heads), not when a2 has gone. So does a3, within a's own
    quota: a guarantee does not wait behind a borrower, not even its own queue's. c1 (c has
    no quota: it would borrow) waits its turn."""
    core = core_with(tenancy({"a": (8, None, None), "b": (8, None, None), "c": (0, None, None)}))
    out = core.step(0, [JobSubmitted(gjob("a1", "a", 6))])
    assert started(out) == ["a1"]
    out = core.step(1, [JobSubmitted(gjob("a2", "a", 4, at=1))])
    assert not started(out)
    assert core.blocked_head is core.jobs["a2"]
    out = core.step(2, [JobSubmitted(gjob("c1", "c", 1, at=2))])
    assert not started(out)
    out = core.step(3, [JobSubmitted(gjob("a3", "a", 1, at=3))])
    assert started(out) == ["a3"]
    out = core.step(4, [JobSubmitted(gjob("b1", "b", 1, at=4))])
    assert started(out) == ["b1"]
    assert core.jobs["a2"].phase is JobPhase.QUEUED
    out = core.step(5, [JobExited("a1")])
    assert started(out)[0] == "a2"  # then the global order goes on
    core.tenants.ledger.check_invariants()  # type: ignore[union-attr]


def test_unknown_queue_is_rejected_with_the_known_ones() -> None:
    core = core_with(tenancy({"a": (2, None, None)}))
    out = core.step(0, [JobSubmitted(gjob("x", "nope", 1))])
    assert isinstance(out[0], RejectJob)
    assert "unknown queue 'nope'; queues: a" in out[0].reason


def test_borrow_then_reclaim_by_preemption() -> None:
    core = core_with(tenancy({"a": (4, None, None), "b": (4, None, None)}))
    # b is idle: a borrows b's 4 GPUs with a preemptible (silver) job
    out = core.step(0, [JobSubmitted(gjob("a1", "a", 4)), JobSubmitted(gjob("a2", "a", 4))])
    assert started(out) == ["a1", "a2"]
    gate = core.tenants
    assert gate is not None
    assert gate.ledger.borrowed("a")
    # b's own job arrives: the borrower is preempted, b's job waits for the room
    out = core.step(10, [JobSubmitted(gjob("b1", "b", 4, at=10))])
    victims = preempted(out)
    assert victims in (["a1"], ["a2"])
    victim = victims[0]
    notice = next(d for d in out if isinstance(d, PreemptJob))
    assert notice.grace_s == 120.0  # silver's grace time
    assert not started(out)
    # while the reclaim runs, a may not borrow again
    out = core.step(11, [JobSubmitted(gjob("a3", "a", 1, at=11))])
    assert not started(out)
    # the victim exits after its notice: it is requeued, and b's job starts
    out = core.step(40, [JobExited(victim, PREEMPTED_EXIT_CODE)])
    assert started(out) == ["b1"]
    a2 = core.jobs[victim]
    assert a2.phase is JobPhase.QUEUED
    assert [t.new for t in a2.history][-2:] == [JobPhase.PREEMPTED, JobPhase.QUEUED]
    assert a2.preemptions == 1
    gate.ledger.check_invariants()


def test_a_reclaimed_borrower_backs_off_before_borrowing_again() -> None:
    core = core_with(tenancy({"a": (4, None, None), "b": (4, None, None)}), borrow_backoff_s=300)
    out = core.step(0, [JobSubmitted(gjob("a1", "a", 4)), JobSubmitted(gjob("a2", "a", 4))])
    out = core.step(10, [JobSubmitted(gjob("b1", "b", 4, at=10))])
    (victim,) = preempted(out)
    other = "a2" if victim == "a1" else "a1"
    core.step(40, [JobExited(victim, PREEMPTED_EXIT_CODE)])
    out = core.step(50, [JobExited("b1")])
    assert not started(out)  # b's room is free again, but the victim may not borrow it yet
    out = core.step(311, [])
    assert started(out) == [victim]  # 300 s after it was preempted
    # preempted again while borrowing: twice as long this time
    out = core.step(320, [JobSubmitted(gjob("b2", "b", 4, at=320))])
    assert preempted(out) == [victim]
    core.step(330, [JobExited(victim, PREEMPTED_EXIT_CODE)])
    out = core.step(340, [JobExited("b2")])
    assert not started(out)
    out = core.step(900, [])
    assert not started(out)
    # within its queue's own quota it need not wait
    out = core.step(910, [JobExited(other)])
    assert started(out) == [victim]
    assert core.tenants is not None
    core.tenants.ledger.check_invariants()


def test_a_backing_off_job_may_top_up_its_queues_unused_guarantee() -> None:
    core = core_with(tenancy({"a": (4, None, None), "b": (4, None, None)}), borrow_backoff_s=300)
    out = core.step(0, [JobSubmitted(gjob("a1", "a", 2)), JobSubmitted(gjob("a2", "a", 6))])
    assert started(out) == ["a1", "a2"]
    out = core.step(10, [JobSubmitted(gjob("b1", "b", 4, at=10))])
    assert preempted(out) == ["a2"]
    core.step(40, [JobExited("a2", PREEMPTED_EXIT_CODE)])
    # a uses 2 of its 4: a2 (6) may borrow the rest although it backs off
    out = core.step(50, [JobExited("b1")])
    assert started(out) == ["a2"]


def test_a_guarantee_waiting_in_the_same_cycle_goes_before_a_borrower() -> None:
    """b's jobs come first in FCFS order, but a's job fits within a's own quota: the room it
    needs is not lent to b in the same cycle (to be reclaimed a grace period later)."""
    core = core_with(tenancy({"a": (4, None, None), "b": (4, None, None)}), gpus=4, nodes=2)
    batch = [gjob(f"b{i}", "b", 1) for i in range(8)] + [gjob("a1", "a", 4)]
    out = core.step(0, [JobSubmitted(s) for s in batch])
    assert sorted(started(out)) == ["a1", "b0", "b1", "b2", "b3"]
    assert not preempted(out)
    # once a's guarantee is served, b borrows what is left as soon as it frees
    out = core.step(10, [JobExited("a1")])
    assert sorted(started(out)) == ["b4", "b5", "b6", "b7"]


def test_borrowers_go_after_the_guarantees_in_the_same_cycle() -> None:
    """A borrower passed over for a claim starts in the same cycle once the claim is served
    and room is left."""
    core = core_with(tenancy({"a": (8, None, None), "b": (4, None, None)}), gpus=4, nodes=3)
    batch = [gjob("b0", "b", 4), gjob("b1", "b", 2), gjob("a1", "a", 4)]
    out = core.step(0, [JobSubmitted(s) for s in batch])
    assert started(out) == ["b0", "a1", "b1"]


def _fragmented() -> SchedulerCore:
    """2 nodes of 4 GPUs; queues a (2), b (3), d (3); b0 and d0 (3 each) run, one per node:
    1 + 1 GPUs free."""
    config = tenancy({"a": (2, None, None), "b": (3, None, None), "d": (3, None, None)})
    core = core_with(config, gpus=4, nodes=2)
    out = core.step(0, [JobSubmitted(gjob("b0", "b", 3)), JobSubmitted(gjob("d0", "d", 3))])
    assert sorted(started(out)) == ["b0", "d0"]
    return core


def test_a_guarantee_that_cannot_be_placed_does_not_keep_borrowers_out() -> None:
    """a1 fits in a's quota and in the free capacity in total, but not on one node: b1, ahead
    of it, borrows a free GPU (a1 may reclaim it later) instead of both waiting."""
    core = _fragmented()
    out = core.step(
        1, [JobSubmitted(gjob("b1", "b", 1, at=1)), JobSubmitted(gjob("a1", "a", 2, at=1))]
    )
    assert "b1" in started(out)


def _easy_core() -> SchedulerCore:
    config = tenancy({"a": (8, None, None), "b": (8, None, None), "e": (0, None, None)})
    core = SchedulerCore(
        CoreConfig(queue_order="fcfs", backfill="easy", tenancy=TenancyPolicy(config))
    )
    core.handle(NodeAdded(node("n0").cpu(64).gpu(8).build()), 0.0)
    assert started(core.step(0, [JobSubmitted(_walled("b0", "b", 6, 0, 1000))])) == ["b0"]
    return core


def _walled(job_id: str, queue: str, gpus: int, at: float, walltime: float) -> JobSpec:
    return (
        job(job_id).tasks(1, cpu=1, gpu=gpus).queue(queue).qos("silver").at(at).walltime(walltime)
    ).build()


@pytest.mark.parametrize("order", [("e1", "a2"), ("a2", "e1")])
def test_backfilling_behind_a_blocked_guarantee_starts_borrowers_and_guarantees(
    order: tuple[str, str],
) -> None:
    """H (a, 4 GPUs) is blocked by room behind b0; the short e1 (e borrows) and a2 (within
    a's quota) behind it both backfill, whichever comes first."""
    core = _easy_core()
    jobs = {"e1": _walled("e1", "e", 1, 2, 10), "a2": _walled("a2", "a", 1, 2, 10)}
    specs = [_walled("H", "a", 4, 1, 1000), *(jobs[j] for j in order)]
    out = core.step(1, [JobSubmitted(s) for s in specs])
    assert sorted(started(out)) == ["a2", "e1"]


def test_an_adopted_borrower_is_charged_to_its_queue() -> None:
    core = _fragmented()
    core.step(1, [JobSubmitted(gjob("a1", "a", 2, at=1))])  # waits: not on one node
    task = AdoptedTask("main", "n0", (3,))
    core.handle(JobAdopted(gjob("old", "b", 1), (task,), 0.5), 2)
    assert core.jobs["old"].phase is JobPhase.RUNNING
    assert core.tenants is not None
    assert sum(core.tenants.ledger.usage("b").values()) == 4


def test_a_reclaim_under_way_does_not_use_up_its_queues_turn() -> None:
    """b borrows 8 of a's 12 GPUs. a1 and a2 reclaim 4 each; a3, arriving while those
    reclaims run, reclaims the last 4 at once — not when a2's victims are gone."""
    core = core_with(tenancy({"a": (12, None, None), "b": (4, None, None)}), gpus=4, nodes=3)
    out = core.step(0, [JobSubmitted(gjob(f"b{i}", "b", 4)) for i in range(3)])
    assert len(started(out)) == 3
    out = core.step(1, [JobSubmitted(gjob(j, "a", 4, at=1)) for j in ("a1", "a2")])
    first = preempted(out)
    assert len(first) == 2
    out = core.step(2, [JobSubmitted(gjob("a3", "a", 4, at=2))])
    (last,) = {"b0", "b1", "b2"} - set(first)
    assert preempted(out) == [last]


def test_gold_does_not_borrow() -> None:
    core = core_with(tenancy({"a": (4, None, None), "b": (4, None, None)}))
    out = core.step(
        0, [JobSubmitted(gjob("g1", "a", 4, "gold")), JobSubmitted(gjob("g2", "a", 2, "gold"))]
    )
    assert started(out) == ["g1"]  # g2 would have to borrow: gold is not preemptible


def test_qos_preemption_picks_the_least_lost_work() -> None:
    config = tenancy({"a": (16, None, None)}, cohort=None)
    core = core_with(config, gpus=4, nodes=2)
    b1 = job("b1").tasks(1, cpu=1, gpu=4).queue("a").qos("bronze").at(0).build()
    b2 = job("b2").tasks(1, cpu=1, gpu=4).queue("a").qos("bronze").at(0).build()
    out = core.step(0, [JobSubmitted(b1), JobSubmitted(b2)])
    assert started(out) == ["b1", "b2"]
    # b1 checkpointed recently, b2 never: stopping b1 loses less
    core.handle(JobCheckpointed("b1", 900.0), 900.0)
    out = core.step(1000, [JobSubmitted(gjob("g", "a", 4, "gold", at=1000))])
    assert preempted(out) == ["b1"]
    out = core.step(1030, [JobExited("b1", PREEMPTED_EXIT_CODE)])
    assert started(out) == ["g"]
    assert core.jobs["b1"].phase is JobPhase.QUEUED


def test_silver_does_not_preempt_silver() -> None:
    core = core_with(tenancy({"a": (16, None, None)}, cohort=None), gpus=4)
    out = core.step(0, [JobSubmitted(gjob("s1", "a", 4))])
    out = core.step(1, [JobSubmitted(gjob("s2", "a", 4, at=1))])
    assert not preempted(out) and not started(out)


def test_preemption_budget_ends_the_job() -> None:
    config = tenancy({"a": (16, None, None)}, cohort=None)
    core = core_with(config, gpus=4, max_preemptions=1)
    core.step(0, [JobSubmitted(gjob("b", "a", 4, "bronze"))])
    for round_, t in enumerate((100.0, 300.0)):
        out = core.step(t, [JobSubmitted(gjob(f"g{round_}", "a", 4, "gold", at=t))])
        assert preempted(out) == ["b"]
        core.step(t + 1, [JobExited("b", PREEMPTED_EXIT_CODE)])
        core.step(t + 2, [JobExited(f"g{round_}")])  # the gold job ends; b runs again
    b = core.jobs["b"]
    assert b.phase is JobPhase.CANCELLED
    assert "retry budget of 1 is spent" in b.history[-1].reason


def test_preempted_job_that_exits_zero_completes() -> None:
    core = core_with(tenancy({"a": (16, None, None)}, cohort=None), gpus=4)
    core.step(0, [JobSubmitted(gjob("b", "a", 4, "bronze"))])
    core.step(5, [JobSubmitted(gjob("g", "a", 4, "gold", at=5))])
    out = core.step(6, [JobExited("b", 0)])
    assert core.jobs["b"].phase is JobPhase.COMPLETED
    assert started(out) == ["g"]


def test_failure_requeue_excludes_the_node_and_waits_for_the_backoff() -> None:
    core = SchedulerCore(CoreConfig(backfill="none"))
    for name in ("n0", "n1"):
        core.handle(NodeAdded(node(name).cpu(4).build()), 0.0)
    out = core.step(0, [JobSubmitted(job("j").tasks(1, cpu=4).build())])
    first = next(d for d in out if isinstance(d, StartJob))
    bad = first.nodes[0]
    out = core.step(
        10, [JobExited("j", -1, "GPU fault", requeue=True, exclude_nodes=(bad,), not_before=40)]
    )
    assert not started(out)
    assert core.jobs["j"].phase is JobPhase.QUEUED
    assert core.next_wakeup() == 40
    assert not started(core.step(39))
    out = core.step(40)
    again = next(d for d in out if isinstance(d, StartJob))
    assert bad not in again.nodes
    assert core.jobs["j"].attempts == 1
    assert core.next_wakeup() is None


def test_requeue_off_every_node_is_rejected() -> None:
    core = SchedulerCore(CoreConfig(backfill="none"))
    core.handle(NodeAdded(node("n0").cpu(4).build()), 0.0)
    core.step(0, [JobSubmitted(job("j").tasks(1, cpu=4).build())])
    out = core.step(1, [JobExited("j", -1, "node lost", requeue=True, exclude_nodes=("n0",))])
    assert any(isinstance(d, RejectJob) for d in out)
    assert core.jobs["j"].phase is JobPhase.CANCELLED


def test_cancel_a_job_waiting_for_its_backoff() -> None:
    core = SchedulerCore(CoreConfig(backfill="none"))
    core.handle(NodeAdded(node("n0").cpu(4).build()), 0.0)
    core.step(0, [JobSubmitted(job("j").tasks(1, cpu=4).build())])
    core.step(1, [JobExited("j", -1, "hang", requeue=True, not_before=100)])
    from fusesched.model.events import JobCancelRequested

    core.step(2, [JobCancelRequested("j")])
    assert core.jobs["j"].phase is JobPhase.CANCELLED
    assert core.next_wakeup() is None


def test_multifactor_order_favours_the_light_user() -> None:
    config = TenancyConfig.from_dict(
        {
            "flavors": [{"name": "gpu", "resources": ["nvidia.com/gpu"]}],
            "organisations": [
                {
                    "name": "o",
                    "tenants": [
                        {
                            "name": "t",
                            "queues": [
                                {
                                    "name": "q",
                                    "users": {"heavy": 1, "light": 1},
                                    "flavors": [
                                        {
                                            "name": "gpu",
                                            "resources": {"nvidia.com/gpu": {"nominal": 100}},
                                        }
                                    ],
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    )
    core = SchedulerCore(
        CoreConfig(
            queue_order="multifactor", backfill="none", tenancy=TenancyPolicy(config, recalc_s=1)
        )
    )
    core.handle(NodeAdded(node("n").cpu(8).gpu(1).build()), 0.0)

    def gj(job_id: str, user: str, at: float) -> JobSpec:
        return job(job_id).tasks(1, cpu=1, gpu=1).queue("q").user(user).at(at).build()

    core.step(0, [JobSubmitted(gj("h0", "heavy", 0))])
    core.step(3600, [JobExited("h0")])  # heavy used the GPU for an hour
    core.step(3601, [JobSubmitted(gj("blocker", "heavy", 3601))])
    out = core.step(
        3602, [JobSubmitted(gj("h1", "heavy", 3602)), JobSubmitted(gj("l1", "light", 3603))]
    )
    core.step(4000, [JobExited("blocker")])
    nxt = [j for j in ("h1", "l1") if core.jobs[j].phase is JobPhase.RUNNING]
    assert nxt == ["l1"], out
    breakdown = core.priority("h1", 4000)
    assert breakdown.factor("fairshare").value < core.priority("l1", 4000).factor("fairshare").value
    assert "fairshare" in breakdown.explain()


def test_policy_from_dict_validates() -> None:
    base = {"flavors": [{"name": "gpu", "resources": ["nvidia.com/gpu"]}]}
    policy = TenancyPolicy.from_dict(
        {**base, "scheduling": {"half_life_s": 3600, "weights": {"age": 5}}}
    )
    assert policy.half_life_s == 3600 and policy.weights.age == 5
    with pytest.raises(TenancyError, match="unknown field"):
        TenancyPolicy.from_dict({**base, "scheduling": {"half_life": 1}})
    with pytest.raises(TenancyError, match="victim order"):
        TenancyPolicy.from_dict({**base, "scheduling": {"victim_order": "random"}})
    with pytest.raises(TenancyError, match="borrow_backoff_s"):
        TenancyPolicy.from_dict({**base, "scheduling": {"borrow_backoff_s": -1}})
    assert TenancyPolicy.from_dict(
        {**base, "scheduling": {"borrow_backoff_s": 300}}
    ).borrow_backoff_s


# ----------------------------------------------------------------------------- simulator


def test_simulated_reclaim_keeps_checkpointed_work() -> None:
    config = tenancy({"a": (4, None, None), "b": (4, None, None)})
    nodes = [node("n0").cpu(64).gpu(8).build()]

    def sj(job_id: str, queue: str, at: float, runtime: float, interval: float | None) -> SimJob:
        b = job(job_id).tasks(1, cpu=1, gpu=4).queue(queue).at(at).walltime(10 * runtime)
        return SimJob((b.checkpoint_every(interval) if interval else b).build(), runtime)

    jobs = [
        sj("a1", "a", 0, 1000, None),
        sj("a2", "a", 0, 1000, 300),  # borrows b's quota, checkpoints every 300 s
        sj("b1", "b", 500, 100, None),  # b wants its quota back at 500
    ]
    cfg = CoreConfig(backfill="none", tenancy=TenancyPolicy(config))
    result = Simulation(nodes, jobs, cfg).run()
    out = {o.job_id: o for o in result.outcomes}
    a2 = out["a2"]
    assert a2.preemptions == 1
    # notice at 500, killed at 620 (silver grace 120): work up to the checkpoint at 600 is kept
    assert a2.lost_s == pytest.approx(20)
    assert out["b1"].start == pytest.approx(620)
    # a2 restarts when b1 ends (720) and runs its remaining 400 s
    assert a2.end == pytest.approx(720 + 400)
    assert out["a1"].end == pytest.approx(1000)


# ----------------------------------------------------------------------------- exclusive


def test_an_exclusive_job_gets_whole_idle_nodes() -> None:
    core = SchedulerCore(CoreConfig(backfill="easy"))
    for name in ("n0", "n1", "n2"):
        core.handle(NodeAdded(node(name).cpu(8).build()), 0.0)
    out = core.step(0, [JobSubmitted(job("small").tasks(1, cpu=1).walltime(100).build())])
    small_node = next(d for d in out if isinstance(d, StartJob)).nodes[0]
    exclusive = job("x").tasks(2, cpu=1).walltime(100).build()
    exclusive = replace(exclusive, placement=replace(exclusive.placement, exclusive=True))
    out = core.step(1, [JobSubmitted(exclusive)])
    placed = next(d for d in out if isinstance(d, StartJob))
    assert small_node not in placed.nodes  # only idle nodes
    # nothing else lands on its nodes while it runs, even though its tasks use 1 CPU each
    out = core.step(2, [JobSubmitted(job("more").tasks(1, cpu=4).walltime(100).build())])
    more = next(d for d in out if isinstance(d, StartJob))
    assert more.nodes[0] not in placed.nodes
    core.step(3, [JobExited("x")])
    cpu = core.cluster.columns["cpu"]
    free = {n: int(core.cluster.free[core.cluster.index[n], cpu]) for n in placed.nodes}
    assert all(v == 8000 for v in free.values())  # everything given back


def test_jobs_run_on_the_nodes_of_the_flavour_they_are_charged_to() -> None:
    config = TenancyConfig.from_dict(
        {
            "flavors": [
                {
                    "name": "a100",
                    "resources": ["nvidia.com/gpu"],
                    "node_labels": {"fusesched.io/gpu-model": "A100"},
                },
                {
                    "name": "h100",
                    "resources": ["nvidia.com/gpu"],
                    "node_labels": {"fusesched.io/gpu-model": "H100"},
                },
            ],
            "organisations": [
                {
                    "name": "o",
                    "tenants": [
                        {
                            "name": "t",
                            "queues": [
                                {
                                    "name": "q",
                                    "flavors": [
                                        {
                                            "name": "a100",
                                            "resources": {"nvidia.com/gpu": {"nominal": 4}},
                                        },
                                        {
                                            "name": "h100",
                                            "resources": {"nvidia.com/gpu": {"nominal": 4}},
                                        },
                                    ],
                                }
                            ],
                        }
                    ],
                }
            ],
        }
    )
    core = SchedulerCore(CoreConfig(backfill="none", tenancy=TenancyPolicy(config)))
    # the H100 node comes first: placement alone would put the first job there
    core.handle(
        NodeAdded(node("h").cpu(8).gpu(4).label("fusesched.io/gpu-model", "H100").build()), 0
    )
    core.handle(
        NodeAdded(node("a").cpu(8).gpu(4).label("fusesched.io/gpu-model", "A100").build()), 0
    )
    out = core.step(0, [JobSubmitted(gjob("first", "q", 4)), JobSubmitted(gjob("second", "q", 4))])
    where = {d.job_id: d.nodes for d in out if isinstance(d, StartJob)}
    assert where == {"first": ("a",), "second": ("h",)}  # A100 quota first, then H100
    out = core.step(1, [JobSubmitted(gjob("third", "q", 1, at=1))])
    assert not started(out)  # both flavours' quotas are used up


def test_a_lender_behind_a_blocked_head_still_reclaims() -> None:
    core = core_with(tenancy({"a": (4, None, None), "b": (4, None, None)}))
    core.step(0, [JobSubmitted(gjob("a1", "a", 4)), JobSubmitted(gjob("a2", "a", 4))])
    head = job("x").tasks(1, cpu=63, gpu=0).queue("a").at(1).build()
    out = core.step(1, [JobSubmitted(head)])  # admitted by quota, blocked by room
    assert not started(out)
    out = core.step(2, [JobSubmitted(gjob("b1", "b", 4, at=2))])
    assert preempted(out) in (["a1"], ["a2"])  # b reclaims at once, not when x has started


def test_a_tenants_dedicated_nodes_run_only_its_jobs() -> None:
    def queue(name: str, flavours: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "flavors": [
                {"name": f, "resources": {"nvidia.com/gpu": {"nominal": 8}}} for f in flavours
            ],
        }

    config = TenancyConfig.from_dict(
        {
            "flavors": [
                {
                    "name": "physics-own",
                    "resources": ["nvidia.com/gpu"],
                    "node_labels": {"fusesched.io/owner": "physics"},
                    "dedicated": True,
                },
                {"name": "shared", "resources": ["nvidia.com/gpu"]},
            ],
            "organisations": [
                {
                    "name": "o",
                    "tenants": [
                        {"name": "physics", "queues": [queue("phys", ["physics-own", "shared"])]},
                        {"name": "biology", "queues": [queue("bio", ["shared"])]},
                    ],
                }
            ],
        }
    )
    core = SchedulerCore(CoreConfig(backfill="easy", tenancy=TenancyPolicy(config)))
    owned = node("owned").cpu(8).gpu(4).label("fusesched.io/owner", "physics").build()
    core.handle(NodeAdded(owned), 0)
    core.handle(NodeAdded(node("common").cpu(8).gpu(4).build()), 0)
    out = core.step(0, [JobSubmitted(gjob("b1", "bio", 4)), JobSubmitted(gjob("b2", "bio", 4))])
    assert {d.job_id: d.nodes for d in out if isinstance(d, StartJob)} == {"b1": ("common",)}
    # b2 waits for "common" (it may not use physics' node); p1 goes past it onto "owned"
    out = core.step(1, [JobSubmitted(gjob("p1", "phys", 4, at=1))])
    assert {d.job_id: d.nodes for d in out if isinstance(d, StartJob)} == {"p1": ("owned",)}
    with pytest.raises(TenancyError, match="exactly one"):
        TenancyConfig.from_dict(
            {
                "flavors": [
                    {
                        "name": "x",
                        "resources": ["nvidia.com/gpu"],
                        "node_labels": {"a": "1", "b": "2"},
                        "dedicated": True,
                    }
                ]
            }
        )


def test_a_head_within_its_guarantee_is_not_overtaken_by_other_guarantees() -> None:
    """a1 (8 GPUs, within a's quota) waits for room, reserved at t=100 on n0; b2 (within b's
    quota, long) may only go where it does not delay that: a1 starts at 100."""
    core = SchedulerCore(
        CoreConfig(
            queue_order="fcfs",
            backfill="easy",
            tenancy=TenancyPolicy(
                tenancy({"a": (8, None, None), "b": (8, None, None), "c": (8, None, None)})
            ),
        )
    )
    for i in range(2):
        core.handle(NodeAdded(node(f"n{i}").cpu(64).gpu(8).build()), 0.0)

    def timed(job_id: str, queue: str, gpus: int, walltime: float, at: float) -> JobSpec:
        return replace(gjob(job_id, queue, gpus, at=at), walltime_s=walltime)

    out = core.step(0, [JobSubmitted(timed("b1", "b", 6, 100, 0))])
    out += core.step(0, [JobSubmitted(timed("c1", "c", 6, 1000, 0))])
    assert started(out) == ["b1", "c1"]
    assert not started(core.step(1, [JobSubmitted(timed("a1", "a", 8, 100, 1))]))
    core.step(2, [JobSubmitted(timed("b2", "b", 2, 10_000, 2))])
    assert started(core.step(100, [JobExited("b1")])) == ["a1"]


def two_by_four(placement: str = "first-fit") -> SchedulerCore:
    """Queues a and b with 4 GPUs of nominal quota each, on two 4-GPU nodes."""
    core = SchedulerCore(
        CoreConfig(
            queue_order="fcfs",
            backfill="easy",
            placement=placement,
            tenancy=TenancyPolicy(tenancy({"a": (4, None, None), "b": (4, None, None)})),
        )
    )
    for i in range(2):
        core.handle(NodeAdded(node(f"n{i}").cpu(64).gpu(4).build()), 0.0)
    return core


def test_a_reclaim_frees_a_place_in_one_round() -> None:
    """b borrows a's half with 1-GPU jobs on both 4-GPU nodes; a1 (4 GPUs on one node, within
    a's quota) reclaims. The cheapest victims (b0, b1 on n0; b4, b5 on n1: just checkpointed)
    would give a's quota back but no node with 4 free GPUs, and a second round of notices (a
    second grace period) would follow: the victims are chosen for quota and place at once."""
    core = two_by_four()
    out = core.step(0, [JobSubmitted(gjob(f"b{i}", "b", 1)) for i in range(8)])
    assert len(started(out)) == 8
    core.step(50, [JobCheckpointed(f"b{i}", 50) for i in (0, 1, 4, 5)])
    victims = preempted(core.step(60, [JobSubmitted(gjob("a1", "a", 4, at=60))]))
    assert sorted(victims) == ["b0", "b1", "b2", "b3"]  # all of n0
    out = core.step(180, [JobExited(v, PREEMPTED_EXIT_CODE) for v in victims])
    assert started(out) == ["a1"]
    core.tenants.ledger.check_invariants()  # type: ignore[union-attr]


def test_victims_are_not_taken_beyond_what_their_queue_borrows() -> None:
    """b uses 5 GPUs of its nominal 4 (n0: b0-b3, n1: b4), a 2 (n1: a0). a1 (2 GPUs, within
    a's quota) is blocked by room. Preempting b0 and b1 (just checkpointed: the cheapest)
    would make a place on n0 but take b below its own guarantee; b4 alone makes one on n1."""
    core = two_by_four()
    out = core.step(0, [JobSubmitted(gjob(f"b{i}", "b", 1)) for i in range(4)])
    out += core.step(1, [JobSubmitted(gjob("a0", "a", 2, at=1))])
    out += core.step(2, [JobSubmitted(gjob("b4", "b", 1, at=2))])
    assert sorted(started(out)) == ["a0", "b0", "b1", "b2", "b3", "b4"]
    core.step(50, [JobCheckpointed(f"b{i}", 50) for i in (0, 1)])
    victims = preempted(core.step(60, [JobSubmitted(gjob("a1", "a", 2, at=60))]))
    assert victims == ["b4"]
    out = core.step(180, [JobExited("b4", PREEMPTED_EXIT_CODE)])
    assert started(out) == ["a1"]
    core.tenants.ledger.check_invariants()  # type: ignore[union-attr]


def test_victims_do_not_take_back_the_room_freed_for_their_preemptor() -> None:
    """Each node runs one of b's gold jobs (2 GPUs, within b's quota, not preemptible) and two
    of its silver 1-GPU borrowers. a1 (4 GPUs on one node) can get its quota back but no place
    until a gold job ends: the borrowers are preempted for the quota, and when they have gone
    they must not restart in that room (they would be preempted again, round after round); a1
    starts when a node is free."""
    core = two_by_four(placement="worst-fit")
    out = core.step(0, [JobSubmitted(gjob(f"g{i}", "b", 2, qos="gold")) for i in range(2)])
    assert started(out) == ["g0", "g1"]
    out = core.step(1, [JobSubmitted(gjob(f"b{i}", "b", 1, at=1)) for i in range(4)])
    assert len(started(out)) == 4
    victims = preempted(core.step(60, [JobSubmitted(gjob("a1", "a", 4, at=60))]))
    assert sorted(victims) == ["b0", "b1", "b2", "b3"]
    out = core.step(180, [JobExited(v, PREEMPTED_EXIT_CODE) for v in victims])
    assert not started(out)  # neither a1 (no place yet) nor the victims (the room is a1's)
    out = core.step(300, [JobExited("g0")])
    assert started(out)[0] == "a1"


def test_a_job_held_by_its_users_limit_starts_when_the_user_frees_one_in_another_queue() -> None:
    """Quota blocks are re-checked only where quota came back: in the job's own pool, or for
    its user (QoS limits count per user across queues)."""
    qos = {
        "silver": {"priority": 5},
        "bronze": {"priority": 1, "max_jobs_per_user": 1},
    }
    config = tenancy(
        {"a": (4, None, None), "b": (4, None, None)}, cohort=None, qos=qos, default_qos="silver"
    )
    core = core_with(config)

    def bronze(job_id: str, queue: str) -> JobSpec:
        return job(job_id).tasks(1, cpu=1, gpu=1).queue(queue).qos("bronze").user("u").build()

    out = core.step(0, [JobSubmitted(bronze("u1", "a")), JobSubmitted(bronze("u2", "b"))])
    assert started(out) == ["u1"]  # u2: the user's one bronze job runs
    out = core.step(1, [JobSubmitted(gjob("v1", "b", 1, at=1))])
    assert started(out) == ["v1"]
    out = core.step(2, [JobExited("v1")])  # b's quota comes back, not u's: u2 still waits
    assert not started(out)
    out = core.step(3, [JobExited("u1")])  # u frees its job in queue a
    assert started(out) == ["u2"]
    core.tenants.ledger.check_invariants()  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{half_life_s: 1e400}", "scheduling.half_life_s: must be a number, not '1e400'"),
        ("{max_preemptions: 2.5}", "scheduling.max_preemptions: must be a whole number"),
        ("{preempt_for_priority: 1}", "scheduling.preempt_for_priority: must be true or false"),
        ("{victim_order: 3}", "scheduling.victim_order: must be a name"),
        ("{weights: {age: high}}", "scheduling.weights.age: must be a number, not 'high'"),
    ],
)
def test_a_scheduling_value_of_the_wrong_type_is_named(section: str, message: str) -> None:
    """YAML reads ``1e400`` as a string: the error names the field, not Python's '>'."""
    import yaml

    from fusesched.model.tenancy import TenancyError

    with pytest.raises(TenancyError) as refused:
        TenancyPolicy.from_dict(yaml.safe_load(f"scheduling: {section}"))
    assert message in str(refused.value)
