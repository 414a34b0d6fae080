"""A job's begin time (``sbatch --begin``): it waits, queued but out of the queue, until then —
however it gets there (submitted, dependencies met, released, updated) — and the core names
the time a shell should run a cycle."""

from __future__ import annotations

from dataclasses import replace

from tests.builders import cancel, exited, job, node, run_script, submit

from fusesched.model.events import JobHoldRequested, JobReleaseRequested, JobUpdateRequested
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase

ONE = [node("n0").cpu(4).build()]


def begins(spec: JobSpec, at: float) -> JobSpec:
    return replace(spec, begin_time=at)


def test_a_job_starts_at_its_begin_time_not_before() -> None:
    run = run_script(ONE, [(0, submit(begins(job("a").walltime(10).build(), 100)))])
    rec = run.core.jobs["a"]
    assert rec.phase is JobPhase.QUEUED and run.core.queue.position(rec) is None
    assert rec.steps[-1][3] == "submitted; begin time 100"
    assert run.core.next_wakeup() == 100
    run.step(99.5, [])
    assert run.starts() == {}
    run.step(100, [])
    assert run.start_times() == {"a": 100}
    assert [step[2] for step in rec.steps] == [JobPhase.QUEUED, JobPhase.RUNNING]


def test_a_begin_time_in_the_past_changes_nothing() -> None:
    run = run_script(ONE, [(50, submit(begins(job("a").build(), 10)))])
    assert run.start_times() == {"a": 50}
    assert run.core.next_wakeup() is None


def test_jobs_behind_it_are_not_blocked() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(begins(job("later").tasks(1, cpu=4).build(), 100))),
            (1, submit(job("now").tasks(1, cpu=4).walltime(10).build())),
        ],
    )
    assert run.start_times() == {"now": 1}


def test_dependencies_met_before_the_begin_time_still_wait_for_it() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(job("blk").tasks(1, cpu=4).walltime(20).build())),
            (1, submit(begins(job("a").after_ok("blk").build(), 100))),
            (20, exited("blk")),
            (30, []),
        ],
    )
    assert "a" not in run.starts() and run.phase("a") is JobPhase.QUEUED
    run.step(100, [])
    assert run.start_times()["a"] == 100


def test_held_released_and_updated_jobs_keep_their_begin_time() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(begins(job("a").build(), 100), begins(job("b").build(), 100))),
            (1, JobHoldRequested("a", "check input")),
            (2, JobUpdateRequested("b", priority=5)),
        ],
    )
    assert run.phase("a") is JobPhase.PENDING and "a" not in run.core._delayed
    run.step(3, JobReleaseRequested("a"))
    assert run.phase("a") is JobPhase.QUEUED and run.phase("b") is JobPhase.QUEUED
    run.step(50, [])
    assert run.starts() == {}
    run.step(100, [])
    assert set(run.start_times()) == {"a", "b"}
    assert run.core.jobs["b"].spec.priority == 5


def test_released_after_the_begin_time_starts_at_once() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(begins(job("a").build(), 100))),
            (1, JobHoldRequested("a")),
            (150, []),
        ],
    )
    assert run.phase("a") is JobPhase.PENDING
    run.step(160, JobReleaseRequested("a"))
    assert run.start_times() == {"a": 160}


def test_a_job_waiting_for_its_begin_time_can_be_cancelled() -> None:
    run = run_script(ONE, [(0, submit(begins(job("a").build(), 100))), (1, cancel("a"))])
    assert run.phase("a") is JobPhase.CANCELLED
    assert run.core._delayed == {} and run.core.next_wakeup() is None
    run.step(100, [])
    assert run.starts() == {}


def test_array_children_each_wait() -> None:
    spec = begins(job("arr").array(0, 2).build(), 40)
    run = run_script(ONE, [(0, submit(spec)), (39, [])])
    assert run.starts() == {}
    run.step(40, [])
    assert set(run.start_times()) == {"arr_0", "arr_1", "arr_2"}
