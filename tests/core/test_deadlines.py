"""A job's deadline (``sbatch --deadline``): a waiting job that can no longer end by it (not
started by ``deadline − time limit``) is removed, cancelled with the reason ``DeadLine``; one
that starts in time runs, and a running job is never stopped by its deadline."""

from __future__ import annotations

from dataclasses import replace

from tests.builders import exited, job, node, run_script, submit

from fusesched.core.deadlines import REASON
from fusesched.model.events import JobExited, JobHoldRequested, JobUpdateRequested, RejectJob
from fusesched.model.job import Dependency, DependencyKind, JobSpec
from fusesched.model.phases import JobPhase

ONE = [node("n0").cpu(4).build()]


def due(spec: JobSpec, deadline: float) -> JobSpec:
    return replace(spec, deadline=deadline)


def blocker(walltime: float) -> JobSpec:
    return job("blk").tasks(1, cpu=4).walltime(walltime).build()


def test_a_job_that_cannot_end_by_its_deadline_is_removed_with_the_reason() -> None:
    # blk holds the node until 100; d (10 s) must start by 50 to end by 60
    d = due(job("d").tasks(1, cpu=4).walltime(10).build(), 60)
    run = run_script(ONE, [(0, submit(blocker(100), d))])
    assert run.core.next_wakeup() == 50  # the shell is told when to look again
    run.step(49.9, [])
    assert run.phase("d") is JobPhase.QUEUED
    run.step(50, [])
    rec = run.core.jobs["d"]
    assert rec.phase is JobPhase.CANCELLED
    assert rec.history[-1].reason == REASON and REASON.startswith("DeadLine")
    assert run.core.queue.position(rec) is None
    assert run.core.next_wakeup() is None
    run.step(100, exited("blk"))
    assert "d" not in run.starts()


def test_a_job_that_can_start_in_time_runs_past_its_latest_start() -> None:
    d = due(job("d").tasks(1, cpu=4).walltime(10).build(), 60)
    run = run_script(ONE, [(0, submit(blocker(20), d)), (20, exited("blk"))])
    assert run.start_times()["d"] == 20
    run.step(55, [])  # past its latest start (50): running jobs are not removed
    assert run.phase("d") is JobPhase.RUNNING
    run.step(65, [])  # nor past the deadline itself (its own time limit ends it)
    assert run.phase("d") is JobPhase.RUNNING


def test_at_its_latest_start_the_cycle_may_still_start_it() -> None:
    d = due(job("d").tasks(1, cpu=4).walltime(10).build(), 60)
    run = run_script(ONE, [(0, submit(blocker(50), d)), (50, exited("blk"))])
    assert run.start_times()["d"] == 50  # it ends at 60: in time


def test_dependents_settle_as_for_a_cancelled_job() -> None:
    d = due(job("d").tasks(1, cpu=4).walltime(10).build(), 60)
    ok = replace(job("ok").build(), dependencies=(Dependency(DependencyKind.AFTER_OK, "d"),))
    notok = replace(
        job("notok").build(), dependencies=(Dependency(DependencyKind.AFTER_NOT_OK, "d"),)
    )
    run = run_script(ONE, [(0, submit(blocker(100), d, ok, notok)), (50, [])])
    assert run.rejected() == {"ok": "dependency d ended cancelled"}
    assert run.phase("notok") is JobPhase.QUEUED  # afternotok: met
    out = run.step(100, exited("blk"))
    assert not [x for x in out if isinstance(x, RejectJob)]
    assert "notok" in run.starts()


def test_a_changed_time_limit_moves_the_latest_start() -> None:
    a = due(job("a").tasks(1, cpu=4).walltime(10).build(), 60)  # latest start 50
    b = due(job("b").tasks(1, cpu=4).walltime(10).build(), 60)
    run = run_script(
        ONE,
        [
            (0, submit(blocker(100), a, b)),
            (1, JobUpdateRequested("a", walltime_s=5)),  # latest start 55
            (2, JobUpdateRequested("b", walltime_s=30)),  # latest start 30
        ],
    )
    run.step(30, [])
    assert run.phase("b") is JobPhase.CANCELLED and run.phase("a") is JobPhase.QUEUED
    run.step(50, [])
    assert run.phase("a") is JobPhase.QUEUED
    run.step(55, [])
    assert run.phase("a") is JobPhase.CANCELLED


def test_a_requeued_job_is_watched_again() -> None:
    d = due(job("d").tasks(1, cpu=4).walltime(10).build(), 60)
    run = run_script(ONE, [(0, submit(d))])
    assert run.start_times() == {"d": 0}
    run.step(5, JobExited("d", -1, "node lost", requeue=True, not_before=52))
    assert run.phase("d") is JobPhase.QUEUED  # waits out its backoff, past its latest start
    run.step(52, [])
    assert run.phase("d") is JobPhase.CANCELLED
    assert run.core.jobs["d"].history[-1].reason == REASON
    assert list(run.start_times()) == ["d"]  # started once only


def test_held_and_dependent_jobs_are_removed_too() -> None:
    held = due(job("h").walltime(10).build(), 60)
    waiting = replace(
        due(job("w").walltime(10).build(), 60),
        dependencies=(Dependency(DependencyKind.AFTER_OK, "blk"),),
    )
    run = run_script(ONE, [(0, submit(blocker(100), waiting))])
    run.step(1, submit(held))
    run.step(1, JobHoldRequested("h", "wait"))
    run.step(50, [])
    assert run.phase("h") is JobPhase.CANCELLED and run.phase("w") is JobPhase.CANCELLED
