"""Requeueing an ended job (EndedJobRequeueRequested, Slurm's ``scontrol requeue`` of a
finished batch job): a completed, failed, cancelled or timed-out job queues again under its
id, one attempt more, its earlier story kept; refused for a job that has not ended, one that
may not be requeued, or one whose dependency can no longer be met."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.builders import Run, cancel, exited, job, make_core, node, run_script, submit

from fusesched.model.events import EndedJobRequeueRequested, JobHoldRequested
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase

ONE = [node("n0").cpu(4).build()]


def spec(job_id: str = "a") -> JobSpec:
    return job(job_id).tasks(1, cpu=4).walltime(10).build()


def ended(how: str) -> Run:
    """Job ``a`` started at 0 and ended ``how`` at 5 (or was cancelled before it started)."""
    script = [(0.0, submit(spec()))]
    if how == "completed":
        script.append((5.0, [exited("a")]))
    elif how == "failed":
        script.append((5.0, [exited("a", code=3)]))
    elif how == "timeout":
        script.append((5.0, [exited("a", code=-15, timed_out=True)]))
    else:
        script.append((5.0, [cancel("a")]))
        script.append((5.0, [exited("a", code=-15)]))
    return run_script(ONE, script)


@pytest.mark.parametrize(
    "how, phase",
    [
        ("completed", JobPhase.COMPLETED),
        ("failed", JobPhase.FAILED),
        ("timeout", JobPhase.TIMEOUT),
        ("cancelled", JobPhase.CANCELLED),
    ],
)
def test_an_ended_job_queues_again_under_its_id_and_runs(how: str, phase: JobPhase) -> None:
    run = ended(how)
    assert run.phase("a") is phase
    out = run.step(20, EndedJobRequeueRequested(spec(), "fixed the input"))
    rec = run.core.jobs["a"]
    assert [d.job_id for d in out] == ["a"]  # started again in the same step
    assert rec.attempts == 1
    back = rec.history[-2]  # (the last one: queued → running)
    assert (back.old, back.new, back.time) == (phase, JobPhase.QUEUED, 20)
    assert back.reason == "requeued (fixed the input)"
    assert [t.new for t in rec.history[:3]] == [JobPhase.QUEUED, JobPhase.RUNNING, phase]
    assert rec.start_time == 20 and rec.end_time is None and rec.exit_code is None
    run.step(25, exited("a"))
    assert run.phase("a") is JobPhase.COMPLETED and rec.exit_code == 0


def test_a_requeued_job_waits_for_room_like_any_other() -> None:
    run = ended("completed")
    run.step(6, submit(job("blk").tasks(1, cpu=4).walltime(50).build()))
    run.step(7, EndedJobRequeueRequested(spec()))
    assert run.phase("a") is JobPhase.QUEUED
    run.step(56, exited("blk"))
    assert run.phase("a") is JobPhase.RUNNING and run.core.jobs["a"].start_time == 56


def test_requeue_then_hold_keeps_it_pending() -> None:
    run = ended("failed")
    run.step(6, submit(job("blk").tasks(1, cpu=4).walltime(50).build()))
    run.step(7, EndedJobRequeueRequested(spec()), JobHoldRequested("a", "requeuehold"))
    run.step(60, exited("blk"))
    assert run.phase("a") is JobPhase.PENDING and run.core.jobs["a"].held == "requeuehold"


def test_a_job_that_has_not_ended_is_refused() -> None:
    run = run_script(ONE, [(0.0, submit(spec()))])
    with pytest.raises(ValueError, match="job a is running: it has not ended"):
        run.step(1, EndedJobRequeueRequested(spec()))


def test_a_no_requeue_job_is_refused_and_stays_ended() -> None:
    no = replace(spec(), requeue=False)
    run = run_script(ONE, [(0.0, submit(no)), (5.0, [exited("a")])])
    with pytest.raises(ValueError, match=r"may not be requeued \(requeue: false"):
        run.step(6, EndedJobRequeueRequested(no))
    assert run.phase("a") is JobPhase.COMPLETED and run.core.jobs["a"].attempts == 0


def test_a_later_job_that_waits_on_it_waits_for_its_new_run() -> None:
    run = ended("failed")
    run.step(6, EndedJobRequeueRequested(spec()))  # running again
    run.step(7, submit(job("b").tasks(1, cpu=4).walltime(10).after_ok("a").build()))
    assert run.phase("b") is JobPhase.PENDING
    run.step(9, exited("a"))
    assert run.phase("b") is JobPhase.RUNNING


def test_a_dependent_cancelled_by_its_failure_can_be_requeued_to_wait_again() -> None:
    """Slurm leaves such a dependent pending (DependencyNeverSatisfied); fusesched cancels
    it, and requeueing it, once its dependency is requeued, lets it wait for the new run."""
    dep = job("b").tasks(1, cpu=4).walltime(10).after_ok("a").build()
    run = run_script(ONE, [(0.0, submit(spec(), dep)), (5.0, [exited("a", code=1)])])
    assert run.phase("b") is JobPhase.CANCELLED
    with pytest.raises(ValueError, match="cannot be requeued: dependency a ended failed"):
        run.step(6, EndedJobRequeueRequested(dep))
    assert run.phase("b") is JobPhase.CANCELLED
    run.step(7, EndedJobRequeueRequested(spec()))
    run.step(8, EndedJobRequeueRequested(dep))
    rec = run.core.jobs["b"]
    assert rec.phase is JobPhase.PENDING and rec.waiting_on == {"a"}
    assert rec.history[-1].old is JobPhase.CANCELLED
    run.step(9, exited("a"))
    assert run.phase("b") is JobPhase.RUNNING


def test_a_job_that_ran_does_not_wait_on_its_dependencies_again() -> None:
    dep = job("b").tasks(1, cpu=4).walltime(10).after_ok("a").build()
    run = run_script(ONE, [(0.0, submit(spec(), dep)), (5.0, [exited("a")]), (9, exited("b"))])
    run.step(10, EndedJobRequeueRequested(spec()))  # a runs again…
    run.step(11, EndedJobRequeueRequested(dep))  # …and b, which ran, does not wait for it
    assert run.phase("b") is JobPhase.QUEUED and not run.core.jobs["b"].waiting_on


def test_a_core_that_no_longer_holds_it_takes_it_as_new() -> None:
    core = make_core(ONE)
    out = core.step(3, [EndedJobRequeueRequested(spec(), "after a restart")])
    rec = core.jobs["a"]
    assert [d.job_id for d in out] == ["a"] and rec.attempts == 1
    assert rec.history[0].reason == "requeued (after a restart)"


def test_a_requeue_that_can_never_fit_is_refused() -> None:
    run = ended("completed")
    big = job("a").tasks(1, cpu=64).walltime(10).build()
    with pytest.raises(ValueError, match="job a cannot be requeued"):
        run.step(6, EndedJobRequeueRequested(big))
    assert run.phase("a") is JobPhase.COMPLETED
