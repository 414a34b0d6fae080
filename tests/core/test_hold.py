"""Holding and releasing waiting jobs in the core (JobHoldRequested, JobReleaseRequested):
a held job never starts, whatever frees up; released, it queues again."""

from __future__ import annotations

import pytest
from tests.builders import cancel, exited, job, node, run_script, submit

from fusesched.model.events import (
    Event,
    JobHoldRequested,
    JobReleaseRequested,
    JobUpdateRequested,
)
from fusesched.model.job import QoS
from fusesched.model.phases import JobPhase

ONE = [node("n0").cpu(4).build()]


def blocker() -> list[Event]:
    return submit(job("blk").tasks(1, cpu=4).walltime(50).build())


def test_a_held_queued_job_waits_until_released() -> None:
    run = run_script(
        ONE,
        [
            (0, blocker()),
            (1, submit(job("a").tasks(1, cpu=4).walltime(10).build())),
            (2, JobHoldRequested("a", "wrong input")),
            (50, exited("blk")),
            (60, []),
        ],
    )
    assert run.phase("a") is JobPhase.PENDING and run.core.jobs["a"].held == "wrong input"
    assert "a" not in run.starts()
    run.step(70, JobReleaseRequested("a"))
    assert run.core.jobs["a"].held is None
    assert run.start_times()["a"] == 70


def test_a_job_behind_a_held_one_takes_the_room() -> None:
    run = run_script(
        ONE,
        [
            (0, blocker()),
            (1, submit(job("a").tasks(1, cpu=4).walltime(10).build())),
            (2, submit(job("b").tasks(1, cpu=4).walltime(10).build())),
            (3, JobHoldRequested("a")),
            (50, exited("blk")),
        ],
    )
    assert run.start_times() == {"blk": 0, "b": 50}


def test_a_held_job_stays_pending_when_its_dependencies_are_met() -> None:
    run = run_script(
        ONE,
        [
            (0, blocker()),
            (1, submit(job("a").after_ok("blk").build())),
            (2, JobHoldRequested("a")),
            (50, exited("blk")),
        ],
    )
    assert run.phase("a") is JobPhase.PENDING and run.core.jobs["a"].waiting_on == set()
    run.step(60, JobReleaseRequested("a"))
    assert run.start_times()["a"] == 60


def test_releasing_a_job_still_waiting_for_its_dependencies_keeps_it_waiting() -> None:
    run = run_script(
        ONE,
        [
            (0, blocker()),
            (1, submit(job("a").after_ok("blk").build())),
            (2, JobHoldRequested("a")),
            (3, JobReleaseRequested("a")),
        ],
    )
    assert run.phase("a") is JobPhase.PENDING and run.core.jobs["a"].waiting_on == {"blk"}
    run.step(50, exited("blk"))
    assert run.start_times()["a"] == 50


def test_a_held_job_can_be_cancelled_and_a_held_array_child_frees_its_slot() -> None:
    run = run_script(
        [node("n0").cpu(4).build()],
        [
            (0, blocker()),
            (
                1,
                submit(
                    job("arr").tasks(1, cpu=1).walltime(100).array(0, 2, max_parallel=2).build()
                ),
            ),
            (2, JobHoldRequested("arr_0")),
            (3, cancel("arr_0")),
            (10, exited("blk")),
        ],
    )
    assert run.phase("arr_0") is JobPhase.CANCELLED
    assert {"arr_1", "arr_2"} <= set(run.starts())


@pytest.mark.parametrize("phase", ["running", "ended"])
def test_only_waiting_jobs_can_be_held(phase: str) -> None:
    run = run_script(ONE, [(0, blocker())])
    if phase == "ended":
        run.step(50, exited("blk"))
    with pytest.raises(ValueError, match="only a waiting job can be held"):
        run.core.handle(JobHoldRequested("blk"), 60)
    with pytest.raises(KeyError):
        run.core.handle(JobHoldRequested("nope"), 60)
    assert run.core.handle(JobReleaseRequested("blk"), 60) == []  # not held: nothing


def test_holding_again_replaces_the_reason() -> None:
    run = run_script(ONE, [(0, blocker()), (1, submit(job("a").tasks(1, cpu=4).build()))])
    run.step(2, JobHoldRequested("a", "first"))
    run.step(3, JobHoldRequested("a", "second"))
    assert run.core.jobs["a"].held == "second" and run.phase("a") is JobPhase.PENDING


def test_an_update_reorders_the_queue_and_a_running_job_cannot_change() -> None:
    script = [
        (0, blocker()),
        (1, submit(job("a").tasks(1, cpu=4).walltime(10).build())),
        (2, submit(job("b").tasks(1, cpu=4).walltime(10).build())),
        (3, JobUpdateRequested("b", priority=50)),
        (50, exited("blk")),
    ]
    run = run_script(ONE, script, queue_order="priority")
    assert run.core.jobs["b"].spec.priority == 50 and run.core.jobs["b"].facts.priority == 50
    assert run.start_times()["b"] == 50 and "a" not in run.starts()
    with pytest.raises(ValueError, match="only a waiting job can be changed"):
        run.core.handle(JobUpdateRequested("b", priority=5), 60)


def test_a_shorter_time_limit_is_the_new_estimate() -> None:
    long = job("a").tasks(1, cpu=4).walltime(900).build()
    run = run_script(ONE, [(0, blocker()), (1, submit(long))])
    run.step(2, JobUpdateRequested("a", walltime_s=120, qos=QoS.GOLD))
    rec = run.core.jobs["a"]
    assert (rec.spec.walltime_s, rec.estimate, rec.spec.qos) == (120, 120, QoS.GOLD)
    assert rec.phase is JobPhase.QUEUED
