"""What the tenancy gate keeps of a queued job that is held or updated (core/intake.py
``hold``, ``update``; core/tenants.py ``held``, ``dequeued``).

An update only re-orders a job: it keeps the reclaim under way for it (else its victims were
preempted for nothing and more were chosen at the next cycle) and its borrowing back-off
(else an update would lift it). A hold keeps the back-off too (a hold and a release must not
lift it), but ends the reclaim: a held job cannot take the room its victims free, so its
cohort may borrow again. A cancel forgets both.
"""

from __future__ import annotations

from tests.core.test_tenancy_core import core_with, gjob, preempted, started, tenancy

from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    JobCancelRequested,
    JobExited,
    JobHoldRequested,
    JobReleaseRequested,
    JobSubmitted,
    JobUpdateRequested,
)
from fusesched.model.phases import JobPhase
from fusesched.sim.engine import PREEMPTED_EXIT_CODE


def reclaiming() -> tuple[SchedulerCore, list[str]]:
    """Queue a borrows all of b's quota with four 2-GPU jobs; b's 4-GPU job reclaims it:
    two of a's jobs are asked to stop (the victims, still running)."""
    core = core_with(tenancy({"a": (4, None, None), "b": (4, None, None)}))
    out = core.step(0, [JobSubmitted(gjob(f"a{i}", "a", 2)) for i in range(4)])
    assert len(started(out)) == 4
    out = core.step(10, [JobSubmitted(gjob("b1", "b", 4, at=10))])
    victims = preempted(out)
    assert len(victims) == 2
    assert core.tenants is not None and core.tenants.preempting_for("b1")
    return core, victims


def test_an_update_keeps_the_reclaim_under_way() -> None:
    core, victims = reclaiming()
    out = core.step(11, [JobUpdateRequested("b1", priority=5)])
    assert preempted(out) == []  # no second round of victims for the same reclaim
    assert core.tenants is not None and core.tenants.preempting_for("b1")
    out = core.step(12, [JobExited(v, PREEMPTED_EXIT_CODE) for v in victims])
    assert started(out) == ["b1"]  # the room its victims freed is its own
    core.tenants.ledger.check_invariants()


def test_a_hold_ends_the_reclaim_and_a_cancel_forgets_it() -> None:
    core, _ = reclaiming()
    core.step(11, [JobHoldRequested("b1", "not yet")])
    assert core.tenants is not None and not core.tenants.preempting_for("b1")
    core, _ = reclaiming()
    core.step(11, [JobCancelRequested("b1", "no")])
    assert core.tenants is not None and not core.tenants.preempting_for("b1")


def backing_off() -> tuple[SchedulerCore, str]:
    """A borrower preempted by a reclaim, requeued and backing off from borrowing for 300 s
    (from t=10); b's room is free again from t=50."""
    core = core_with(tenancy({"a": (4, None, None), "b": (4, None, None)}), borrow_backoff_s=300)
    core.step(0, [JobSubmitted(gjob("a1", "a", 4)), JobSubmitted(gjob("a2", "a", 4))])
    (victim,) = preempted(core.step(10, [JobSubmitted(gjob("b1", "b", 4, at=10))]))
    core.step(40, [JobExited(victim, PREEMPTED_EXIT_CODE)])
    assert not started(core.step(50, [JobExited("b1")]))
    assert core.jobs[victim].phase is JobPhase.QUEUED
    return core, victim


def test_an_update_keeps_the_borrowing_back_off() -> None:
    core, victim = backing_off()
    out = core.step(60, [JobUpdateRequested(victim, priority=3)])
    assert not started(out)  # the update does not lift the back-off
    assert core.jobs[victim].spec.priority == 3
    assert started(core.step(311, [])) == [victim]  # 300 s after it was preempted


def test_a_hold_and_a_release_keep_the_borrowing_back_off() -> None:
    core, victim = backing_off()
    core.step(60, [JobHoldRequested(victim, "look")])
    out = core.step(70, [JobReleaseRequested(victim)])
    assert not started(out)
    assert started(core.step(311, [])) == [victim]


def test_a_cancel_forgets_the_back_off() -> None:
    core, victim = backing_off()
    core.step(60, [JobCancelRequested(victim, "no")])
    assert core.tenants is not None and not core.tenants._backoff.active(victim, 60)


def test_cancelling_a_held_job_forgets_its_back_off() -> None:
    core, victim = backing_off()
    core.step(60, [JobHoldRequested(victim, "look")])
    core.step(61, [JobCancelRequested(victim, "no")])
    assert core.jobs[victim].phase is JobPhase.CANCELLED
    assert core.tenants is not None and not core.tenants._backoff.active(victim, 61)
