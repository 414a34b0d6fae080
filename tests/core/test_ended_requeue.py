"""Requeueing an ended job (EndedJobRequeueRequested, Slurm's ``scontrol requeue`` of a
finished batch job): a completed, failed, cancelled or timed-out job queues again under its
id, one attempt more, its earlier story kept; refused for a job that has not ended, one that
may not be requeued, or one whose dependency can no longer be met."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.builders import Run, cancel, exited, job, make_core, node, run_script, submit

from fusesched.model.events import ArrayRecalled, EndedJobRequeueRequested, JobHoldRequested
from fusesched.model.job import ArraySpec, Dependency, DependencyKind, JobSpec
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


# ============================================================================ array members


def members(last: int) -> list[JobSpec]:
    """The members ``arr_0`` … ``arr_<last>`` of array ``arr`` (one cpu each)."""
    return job("arr").tasks(1, cpu=1).walltime(10).array(0, last).build().expand_array()


def on_array(job_id: str, kind: DependencyKind) -> JobSpec:
    built = job(job_id).tasks(1, cpu=1).walltime(10).build()
    return replace(built, dependencies=(Dependency(kind, "arr"),))


def test_a_requeued_failed_member_no_longer_breaks_afterok_on_its_array() -> None:
    """The member's failure cancelled the job waiting ``afterok`` on the whole array; once
    the member is requeued and completes, that job can be requeued and runs."""
    arr = members(1)
    red = on_array("red", DependencyKind.AFTER_OK)
    run = run_script(ONE, [(0, submit(*arr, red)), (5, [exited("arr_0"), exited("arr_1", 3)])])
    assert run.phase("red") is JobPhase.CANCELLED
    run.step(6, EndedJobRequeueRequested(arr[1]))
    tally = run.core.arrays.tallies["arr"]
    assert tally.failed == "" and tally.unended == {"arr_1"}
    run.step(9, exited("arr_1"))
    assert run.phase("arr_1") is JobPhase.COMPLETED and not tally.unended
    run.step(10, EndedJobRequeueRequested(red))
    assert run.phase("red") is JobPhase.RUNNING


def test_a_requeued_member_is_waited_for_by_a_later_afterany_on_its_array() -> None:
    arr = members(1)
    script = [(0.0, submit(*arr, on_array("one", DependencyKind.AFTER_ANY)))]
    run = run_script(ONE, [*script, (5.0, [exited("arr_0"), exited("arr_1")])])
    assert run.phase("one") is JobPhase.RUNNING
    run.step(6, EndedJobRequeueRequested(arr[1]), JobHoldRequested("arr_1", "requeuehold"))
    run.step(7, submit(on_array("two", DependencyKind.AFTER_ANY)))
    assert run.phase("two") is JobPhase.PENDING  # arr_1 is pending again, held
    assert run.core.arrays.tallies["arr"].unstarted == {"arr_1"}


def test_a_requeued_member_that_fails_again_breaks_afterok_again() -> None:
    arr = members(1)
    seen = on_array("any", DependencyKind.AFTER_ANY)  # (builds the tally)
    run = run_script(ONE, [(0, submit(*arr, seen)), (5, [exited("arr_0"), exited("arr_1", 3)])])
    run.step(6, EndedJobRequeueRequested(arr[1]))
    run.step(7, submit(on_array("red", DependencyKind.AFTER_OK)))
    assert run.phase("red") is JobPhase.PENDING  # waits for the rerun
    run.step(9, exited("arr_1", code=2))
    assert run.phase("red") is JobPhase.CANCELLED
    assert run.core.jobs["red"].history[-1].reason.endswith("arr_1 failed")


def test_the_next_failed_member_is_named_once_the_first_is_requeued() -> None:
    arr = members(2)
    script = [(5.0, [exited("arr_0", 1), exited("arr_1", 1), exited("arr_2")])]
    run = run_script(ONE, [(0.0, submit(*arr)), *script])
    run.step(6, submit(on_array("fix", DependencyKind.AFTER_NOT_OK)))  # builds the tally
    assert run.core.arrays.tallies["arr"].failed == "arr_0 failed"
    run.step(7, EndedJobRequeueRequested(arr[0]), JobHoldRequested("arr_0", "hold"))
    assert run.core.arrays.tallies["arr"].failed == "arr_1 failed"
    run.step(8, EndedJobRequeueRequested(arr[1]), JobHoldRequested("arr_1", "hold"))
    assert run.core.arrays.tallies["arr"].failed == ""


def test_a_member_recalled_after_a_restart_counts_as_unended_once_requeued() -> None:
    core = make_core(ONE)
    arr = members(1)
    ended_before = {"arr_0": JobPhase.COMPLETED, "arr_1": JobPhase.FAILED}
    core.step(0, [ArrayRecalled("arr", ArraySpec(0, 1), ended_before)])
    core.step(1, submit(on_array("fix", DependencyKind.AFTER_NOT_OK)))  # released
    core.step(2, [EndedJobRequeueRequested(arr[1]), JobHoldRequested("arr_1", "hold")])
    assert "arr_1" not in core.arrays.recalled
    core.step(3, submit(on_array("any", DependencyKind.AFTER_ANY)))
    assert core.jobs["any"].phase is JobPhase.PENDING
    assert core.arrays.tallies["arr"].failed == ""
