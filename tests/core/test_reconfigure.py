"""Reconfiguring a running core (core/reconfig.py): new quotas and license counts apply at
the next cycle, running jobs keep running under smaller ones, fair-share usage is kept for
accounts that still exist, and a change that would orphan work is refused whole."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from builders import job, node
from fusesched.core import reconfig
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import Decision, JobExited, JobSubmitted, NodeAdded, StartJob
from fusesched.model.job import JobSpec
from fusesched.model.licenses import LicenseError
from fusesched.model.phases import JobPhase
from fusesched.policies.registry import CoreConfig
from fusesched.policies.tenancy_diff import license_changes, tenancy_changes
from fusesched.policies.tenancy_policy import TenancyPolicy


def tenancy(quotas: dict[str, int], **extra: Any) -> TenancyPolicy:
    """Queues of tenant ``t`` (one per entry: its GPU quota), each its own cohort of one."""
    queues = [
        {"name": name, "flavors": [{"name": "gpu", "resources": {"nvidia.com/gpu": n}}]}
        for name, n in quotas.items()
    ]
    return TenancyPolicy.from_dict(
        {
            "flavors": [{"name": "gpu", "resources": ["nvidia.com/gpu"]}],
            "organisations": [{"name": "o", "tenants": [{"name": "t", "queues": queues}]}],
            **extra,
        }
    )


def core_with(policy: TenancyPolicy | None = None, licenses: Any = ()) -> SchedulerCore:
    core = SchedulerCore(
        CoreConfig(queue_order="fcfs", backfill="none", tenancy=policy, licenses=licenses)
    )
    core.handle(NodeAdded(node("n0").cpu(64).gpu(8).build()), 0.0)
    return core


def gjob(job_id: str, queue: str, gpus: int, qos: str = "silver", user: str = "u") -> JobSpec:
    return job(job_id).tasks(1, cpu=1, gpu=gpus).queue(queue).qos(qos).user(user).build()


def ljob(job_id: str, **licenses: int) -> JobSpec:
    spec = job(job_id).tasks(1, cpu=1).build()
    return replace(spec, licenses=tuple(sorted(licenses.items())))


def started(decisions: list[Decision]) -> list[str]:
    return [d.job_id for d in decisions if isinstance(d, StartJob)]


def change(core: SchedulerCore, now: float, **kwargs: Any) -> None:
    reconfig.apply(core, reconfig.prepare(core, **kwargs), now)


# ============================================================================ quotas


def test_a_raised_quota_starts_a_parked_job_at_the_next_cycle() -> None:
    core = core_with(tenancy({"a": 2, "b": 2}))
    out = core.step(0, [JobSubmitted(gjob("a1", "a", 2)), JobSubmitted(gjob("a2", "a", 2))])
    assert started(out) == ["a1"]
    assert not started(core.step(1))  # a2 waits for a's quota
    change(core, 2, tenancy=tenancy({"a": 4, "b": 2}))
    assert started(core.step(2)) == ["a2"]
    gate = core.tenants
    assert gate is not None
    assert gate.ledger.usage("a") == {("gpu", "nvidia.com/gpu"): 4}
    gate.ledger.check_invariants()
    assert core.config.tenancy == tenancy({"a": 4, "b": 2})


def test_a_shrunk_quota_keeps_running_jobs_and_holds_new_ones() -> None:
    core = core_with(tenancy({"a": 6}))
    out = core.step(0, [JobSubmitted(gjob(f"a{i}", "a", 2)) for i in range(3)])
    assert started(out) == ["a0", "a1", "a2"]
    change(core, 1, tenancy=tenancy({"a": 2}))
    gate = core.tenants
    assert gate is not None
    assert gate.ledger.usage("a") == {("gpu", "nvidia.com/gpu"): 6}  # charged, above quota
    assert all(core.jobs[f"a{i}"].phase is JobPhase.RUNNING for i in range(3))
    assert not started(core.step(2, [JobSubmitted(gjob("a3", "a", 2))]))
    assert not started(core.step(3, [JobExited("a0")]))  # 4 in use: still above 2
    assert not started(core.step(4, [JobExited("a1")]))  # 2 in use: no room for 2 more
    assert started(core.step(5, [JobExited("a2")])) == ["a3"]
    gate.ledger.check_invariants()


def test_running_jobs_stay_charged_to_the_flavour_they_hold() -> None:
    """Two flavours of the same GPUs (no labels: any node): a1 fills ``spot``, a2 goes to
    ``ondemand``. Raising spot's quota leaves a2 charged to ondemand (not moved to the first
    flavour with room), so ondemand's use is still what runs there."""

    def flavours(spot: int) -> TenancyPolicy:
        quotas = [
            {"name": name, "resources": {"nvidia.com/gpu": n}}
            for name, n in (("spot", spot), ("ondemand", 4))
        ]
        return TenancyPolicy.from_dict(
            {
                "flavors": [
                    {"name": "spot", "resources": ["nvidia.com/gpu"]},
                    {"name": "ondemand", "resources": ["nvidia.com/gpu"]},
                ],
                "organisations": [
                    {
                        "name": "o",
                        "tenants": [{"name": "t", "queues": [{"name": "a", "flavors": quotas}]}],
                    }
                ],
            }
        )

    core = core_with(flavours(spot=2))
    out = core.step(0, [JobSubmitted(gjob("a1", "a", 2)), JobSubmitted(gjob("a2", "a", 2))])
    assert started(out) == ["a1", "a2"]
    change(core, 1, tenancy=flavours(spot=8))
    gate = core.tenants
    assert gate is not None
    assert {j: dict(a.flavors) for j, a in gate.ledger.jobs.items()} == {
        "a1": {"nvidia.com/gpu": "spot"},
        "a2": {"nvidia.com/gpu": "ondemand"},
    }
    assert gate.ledger.usage("a") == {
        ("spot", "nvidia.com/gpu"): 2,
        ("ondemand", "nvidia.com/gpu"): 2,
    }
    # a flavour that is gone: the job is charged to the first one its node stands for
    change(core, 2, tenancy=tenancy({"a": 8}))
    gate = core.tenants
    assert gate is not None
    assert gate.ledger.usage("a") == {("gpu", "nvidia.com/gpu"): 4}
    assert core.jobs["a2"].admission is not None
    gate.ledger.check_invariants()


def test_a_running_job_no_flavour_would_take_now_stays_charged() -> None:
    """j1 asks for pool=x nodes and runs on one, charged to flavour ``big`` (pool=x). The
    file gives ``big`` the label pool=y: no flavour would take j1 now, yet it runs and uses
    8 GPUs of the queue's quota — still charged, so j2 does not start beyond the quota."""

    def policy(pool: str) -> TenancyPolicy:
        quota = [{"name": "big", "resources": {"nvidia.com/gpu": 8}}]
        flavour = {"name": "big", "resources": ["nvidia.com/gpu"], "node_labels": {"pool": pool}}
        tenants = [{"name": "t", "queues": [{"name": "a", "flavors": quota}]}]
        return TenancyPolicy.from_dict(
            {"flavors": [flavour], "organisations": [{"name": "o", "tenants": tenants}]}
        )

    core = SchedulerCore(CoreConfig(queue_order="fcfs", backfill="none", tenancy=policy("x")))
    core.handle(NodeAdded(node("n0").cpu(64).gpu(8).label("pool", "x").build()), 0.0)
    core.handle(NodeAdded(node("n1").cpu(64).gpu(8).label("pool", "y").build()), 0.0)
    j1 = job("j1").tasks(1, cpu=1, gpu=8).queue("a").user("u").selector(pool="x").build()
    assert started(core.step(0, [JobSubmitted(j1)])) == ["j1"]
    change(core, 1, tenancy=policy("y"))
    gate = core.tenants
    assert gate is not None
    assert gate.ledger.usage("a") == {("big", "nvidia.com/gpu"): 8}
    assert not started(core.step(2, [JobSubmitted(gjob("j2", "a", 2))]))  # (the quota is used)
    gate.ledger.check_invariants()


def test_removing_a_queue_or_tier_that_jobs_use_is_refused_and_nothing_changes() -> None:
    core = core_with(tenancy({"a": 2, "b": 2}))
    core.step(0, [JobSubmitted(gjob("b1", "b", 2)), JobSubmitted(gjob("b2", "b", 2))])
    core.step(1, [JobSubmitted(gjob("b3", "b", 2)), JobSubmitted(gjob("a1", "a", 1, "bronze"))])
    before = core.tenants
    with pytest.raises(reconfig.ReconfigureRefused) as caught:
        reconfig.prepare(core, tenancy({"a": 2}))
    assert caught.value.reasons == (
        "queue b has 2 waiting and 1 running jobs: drain it first (let them end or cancel "
        "them), then remove it",
    )
    no_bronze = {"qos": {"silver": {"priority": 50}, "gold": {"priority": 90}}}
    with pytest.raises(reconfig.ReconfigureRefused, match="qos bronze has 1 running job"):
        reconfig.prepare(core, tenancy({"a": 2, "b": 2}, **no_bronze))
    # a job the shell accepted that the core does not hold yet counts as waiting
    with pytest.raises(reconfig.ReconfigureRefused, match="queue c has 1 waiting job:"):
        reconfig.prepare(core, tenancy({"a": 2, "b": 2}), pending=[gjob("c1", "c", 1)])
    assert core.tenants is before


def test_fair_share_usage_is_kept_for_accounts_that_still_exist() -> None:
    core = core_with(tenancy({"a": 8, "b": 8}, scheduling={"recalc_s": 1.0}))
    core.step(0, [JobSubmitted(gjob("a1", "a", 2)), JobSubmitted(gjob("b1", "b", 2))])
    core.step(100, [JobExited("a1"), JobExited("b1")])
    gate = core.tenants
    assert gate is not None
    a_before = gate.tracker.usage_at(("o", "t", "a", "u"), 100)
    assert a_before > 0
    change(core, 100, tenancy=tenancy({"a": 8, "c": 4}, scheduling={"recalc_s": 1.0}))
    gate = core.tenants
    assert gate is not None
    assert gate.tracker.usage_at(("o", "t", "a", "u"), 100) == pytest.approx(a_before)
    assert gate.tracker.usage_at(("o", "t", "a"), 100) == pytest.approx(a_before)
    assert gate.tracker.usage_at(("o", "t", "b", "u"), 100) == 0.0  # queue b is gone
    assert ("o", "t", "b") not in gate.tracker.accounts()


def test_running_jobs_keep_their_usage_clock_across_the_change() -> None:
    core = core_with(tenancy({"a": 8}))
    core.step(0, [JobSubmitted(gjob("a1", "a", 1))])
    change(core, 50, tenancy=tenancy({"a": 8}, scheduling={"gpu_weight": 0.0}))
    core.step(100, [JobExited("a1")])
    gate = core.tenants
    assert gate is not None
    # 50 s at 1 core + 10 × 1 GPU, then 50 s at 1 core (GPUs weigh nothing now)
    used = gate.tracker.usage_at(("o", "t", "a", "u"), 100)
    assert used == pytest.approx(50 * 11 + 50 * 1, rel=1e-3)


def test_the_change_lists_what_differs() -> None:
    old = tenancy({"a": 2, "b": 2})
    new = tenancy({"a": 4, "c": 1}, scheduling={"half_life_s": 3600.0})
    assert [str(c) for c in tenancy_changes(old, new)] == [
        "queue c added",
        "queue b removed",
        "queue a changed (quota gpu/nvidia.com/gpu nominal 2 → 4)",
        "scheduling half_life_s changed (604800 → 3600)",
    ]
    assert tenancy_changes(old, tenancy({"a": 2, "b": 2})) == []
    assert [str(c) for c in license_changes((("ansys", 1), ("matlab", 2)), (("matlab", 3),))] == [
        "license ansys removed",
        "license matlab changed (count 2 → 3)",
    ]


def test_a_core_without_tenancy_cannot_take_one_live() -> None:
    core = core_with()
    with pytest.raises(reconfig.ReconfigureRefused, match="runs without tenancy"):
        reconfig.prepare(core, tenancy({"a": 2}))


def test_preemptions_under_way_go_on_and_take_no_more_victims() -> None:
    """A gold job preempted one bronze job for its place; the victim has not stopped yet
    when the file is re-read. The preemption goes on: no second victim is asked to stop,
    and the gold job takes the place once the first one has."""
    core = core_with(tenancy({"a": 8}))
    bronze = [JobSubmitted(gjob(f"b{i}", "a", 2, "bronze")) for i in range(4)]
    assert started(core.step(0, bronze)) == ["b0", "b1", "b2", "b3"]
    out = core.step(10, [JobSubmitted(gjob("g", "a", 2, "gold"))])
    assert [(type(d).__name__, d.job_id) for d in out] == [("PreemptJob", "b0")]
    change(core, 11, tenancy=tenancy({"a": 8}, scheduling={"gpu_weight": 5.0}))
    assert core.step(11) == []  # (b0 is still stopping: nobody else is preempted)
    gate = core.tenants
    assert gate is not None and gate.preempting_for("g")
    assert started(core.step(12, [JobExited("b0")])) == ["g"]
    assert [core.jobs[f"b{i}"].phase for i in range(1, 4)] == [JobPhase.RUNNING] * 3


def test_a_waiting_job_is_no_longer_held_to_a_removed_flavours_nodes() -> None:
    """j2 was admitted in flavour ``fa`` (nodes pool=a), so pinned to those nodes, and waits
    for room there. The file replaces ``fa`` by ``fb`` (nodes pool=b): j2 starts on a pool=b
    node (it does not wait for pool=a nodes forever, its quota gone)."""

    def policy(flavour: str, pool: str) -> TenancyPolicy:
        quota = [{"name": flavour, "resources": {"nvidia.com/gpu": 16}}]
        return TenancyPolicy.from_dict(
            {
                "flavors": [
                    {
                        "name": flavour,
                        "resources": ["nvidia.com/gpu"],
                        "node_labels": {"pool": pool},
                    }
                ],
                "organisations": [
                    {
                        "name": "o",
                        "tenants": [{"name": "t", "queues": [{"name": "a", "flavors": quota}]}],
                    }
                ],
            }
        )

    core = SchedulerCore(CoreConfig(queue_order="fcfs", backfill="none", tenancy=policy("fa", "a")))
    core.handle(NodeAdded(node("n0").cpu(64).gpu(8).label("pool", "a").build()), 0.0)
    assert started(core.step(0, [JobSubmitted(gjob("j1", "a", 8))])) == ["j1"]
    assert not started(core.step(1, [JobSubmitted(gjob("j2", "a", 2))]))
    assert core.jobs["j2"].spec.placement.node_selector == {"pool": "a"}
    core.handle(NodeAdded(node("n1").cpu(64).gpu(8).label("pool", "b").build()), 2.0)
    change(core, 2, tenancy=policy("fb", "b"))
    assert started(core.step(3)) == ["j2"]
    assert core.jobs["j2"].spec.placement.node_selector == {"pool": "b"}
    gate = core.tenants
    assert gate is not None
    assert gate.ledger.usage("a") == {("fb", "nvidia.com/gpu"): 10}


def test_a_failure_while_applying_leaves_the_old_configuration_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """apply fails after the new gate is built (here: making the license pool): the core
    keeps its old gate, pool and settings, and nothing of theirs changed; the same change
    applies cleanly afterwards."""
    core = core_with(tenancy({"a": 8}), licenses=(("matlab", 2),))
    assert started(core.step(0, [JobSubmitted(gjob("a1", "a", 2))])) == ["a1"]
    old_gate, old_pool, old_config = core.tenants, core.licenses, core.config
    assert old_gate is not None and old_pool is not None
    admission = core.jobs["a1"].admission
    usage = old_gate.tracker.snapshot(50)
    checked = reconfig.prepare(core, tenancy({"a": 4}), (("matlab", 3),))

    def broken(_licenses: object) -> None:
        raise RuntimeError("the pool could not be made")

    monkeypatch.setattr(reconfig.LicensePool, "of", broken)
    with pytest.raises(RuntimeError, match="could not be made"):
        reconfig.apply(core, checked, 50)
    assert core.tenants is old_gate and core.licenses is old_pool and core.config is old_config
    assert core.jobs["a1"].admission is admission
    assert old_gate.tracker.snapshot(50) == usage  # (not charged up to the failed change)
    assert old_gate.ledger.usage("a") == {("gpu", "nvidia.com/gpu"): 2}
    monkeypatch.undo()
    reconfig.apply(core, checked, 50)
    assert core.config.tenancy == tenancy({"a": 4}) and core.config.licenses == (("matlab", 3),)


# ============================================================================ licenses


def test_a_raised_license_count_starts_a_waiting_job() -> None:
    core = core_with(licenses=(("matlab", 1),))
    out = core.step(0, [JobSubmitted(ljob("j1", matlab=1)), JobSubmitted(ljob("j2", matlab=1))])
    assert started(out) == ["j1"]
    change(core, 1, licenses=(("matlab", 2),))
    assert started(core.step(1)) == ["j2"]
    assert core.licenses is not None and core.licenses.used == {"matlab": 2}
    assert core.config.licenses == (("matlab", 2),)


def test_a_lowered_license_count_keeps_running_jobs_and_holds_waiting_ones() -> None:
    core = core_with(licenses=(("matlab", 2),))
    out = core.step(0, [JobSubmitted(ljob("j1", matlab=2))])
    assert started(out) == ["j1"]
    change(core, 1, licenses=(("matlab", 1),))
    assert core.jobs["j1"].phase is JobPhase.RUNNING
    assert not started(core.step(2, [JobSubmitted(ljob("j2", matlab=1))]))
    pool = core.licenses
    assert pool is not None and pool.used == {"matlab": 2} and pool.free("matlab") == 0
    assert started(core.step(3, [JobExited("j1")])) == ["j2"]


def test_licenses_in_use_cannot_be_removed_nor_cut_below_a_waiting_job() -> None:
    core = core_with(licenses=(("ansys", 1), ("matlab", 4)))
    core.step(0, [JobSubmitted(ljob("j1", ansys=1)), JobSubmitted(ljob("j2", ansys=1))])
    core.step(1, [JobSubmitted(ljob("j3", matlab=4))])
    with pytest.raises(reconfig.ReconfigureRefused) as caught:
        reconfig.prepare(core, licenses=(("matlab", 3),))
    assert caught.value.reasons == (  # every reason at once
        "license ansys is held by 1 running job and asked for by 1 waiting job: it cannot be "
        "removed while in use (give it a count instead: running jobs keep what they hold)",
        "license matlab: job j3 waits for 4 and the new count 3 could never start it: keep at "
        "least 4, or cancel the job first",
    )
    assert core.config.licenses == (("ansys", 1), ("matlab", 4))  # nothing changed
    change(core, 2, licenses=(("ansys", 1), ("matlab", 5)))  # (more is fine)
    with pytest.raises(LicenseError, match="the count must be"):
        reconfig.prepare(core, licenses=(("ansys", 0),))


def test_licenses_added_to_a_core_without_and_removed_again() -> None:
    core = core_with()
    change(core, 0, licenses=(("matlab", 1),))
    assert started(core.step(1, [JobSubmitted(ljob("j1", matlab=1))])) == ["j1"]
    core.step(2, [JobExited("j1")])
    change(core, 3, licenses=())
    assert core.licenses is None and core.config.licenses == ()
    assert "try_place" not in vars(core)
    assert core.step(4, [JobSubmitted(ljob("j2", matlab=1))])[0].reason.startswith(  # type: ignore[attr-defined]
        "license 'matlab' is not configured"
    )
