"""A running job's new time limit in the core (``JobUpdateRequested`` → core/intake.py
``relimit``): its estimated end moves (what backfilling reserves around), a limit already
passed stops it as timed out, and only the time limit of a running job may change."""

from __future__ import annotations

import pytest
from tests.builders import Run, exited, job, nodes, run_script, submit

from fusesched.core.intake import TIME_LIMIT_PASSED
from fusesched.model.events import JobUpdateRequested, StopJob
from fusesched.model.job import QoS
from fusesched.model.phases import JobPhase


def backfill_run() -> Run:
    """One 4-CPU node: ``long`` (2 CPUs, limit 1000 s) runs from 0; the head ``wide`` (4 CPUs)
    waits for it, its reservation at 1000."""
    return run_script(
        nodes(1, cpu=4),
        [
            (0, submit(job("long").tasks(1, cpu=2).walltime(1000).build())),
            (1, submit(job("wide").tasks(1, cpu=4).walltime(100).at(1).build())),
        ],
    )


def test_a_shorter_limit_moves_the_end_that_backfilling_reserves_around() -> None:
    run = backfill_run()
    run.step(10, JobUpdateRequested("long", walltime_s=100))
    rec = run.core.jobs["long"]
    assert (rec.spec.walltime_s, rec.est_end, rec.estimate) == (100, 100, 100)
    assert run.phase("long") is JobPhase.RUNNING
    # a 300 s job would end after the head's new start (100): it may not overtake it
    run.step(20, submit(job("short").tasks(1, cpu=2).walltime(300).at(20).build()))
    assert "short" not in run.starts()


def test_without_the_change_the_same_job_backfills() -> None:
    run = backfill_run()
    run.step(20, submit(job("short").tasks(1, cpu=2).walltime(300).at(20).build()))
    assert run.start_times()["short"] == 20  # ends (320) before the head's start (1000)


def test_a_longer_limit_lets_a_job_backfill_behind_it() -> None:
    run = backfill_run()
    run.step(10, JobUpdateRequested("long", walltime_s=100))
    run.step(11, JobUpdateRequested("long", walltime_s=2000))  # an admin gives it more
    rec = run.core.jobs["long"]
    assert (rec.spec.walltime_s, rec.est_end) == (2000, 2000)
    run.step(20, submit(job("short").tasks(1, cpu=2).walltime(1500).at(20).build()))
    assert run.start_times()["short"] == 20  # ends (1520) before the head's start (2000)


def test_a_limit_already_passed_stops_the_job_as_timed_out() -> None:
    run = backfill_run()
    out = run.step(60, JobUpdateRequested("long", walltime_s=30))
    (stop,) = [d for d in out if isinstance(d, StopJob)]
    assert stop.job_id == "long" and stop.reason.startswith(TIME_LIMIT_PASSED)
    rec = run.core.jobs["long"]
    assert rec.stop_requested is None and rec.est_end == 60  # not a cancel; ends now
    run.step(61, exited("long", -15, timed_out=True, reason=stop.reason))
    assert run.phase("long") is JobPhase.TIMEOUT
    assert run.start_times()["wide"] == 61


def test_a_running_jobs_priority_or_qos_cannot_change() -> None:
    run = backfill_run()
    for event in (
        JobUpdateRequested("long", priority=5),
        JobUpdateRequested("long", qos=QoS.BRONZE, walltime_s=10),
    ):
        with pytest.raises(ValueError, match="only a waiting job can be changed in priority"):
            run.core.handle(event, 20)
    rec = run.core.jobs["long"]
    assert (rec.spec.priority, rec.spec.walltime_s) == (0, 1000)  # nothing changed
    run.step(30, exited("long"))
    with pytest.raises(ValueError, match="only a waiting or running job can be changed"):
        run.core.handle(JobUpdateRequested("long", walltime_s=10), 40)


def predicted_run() -> Run:
    """ann's first job ran 100 s: her next one (limit 1000 s) starts at 200, predicted to
    end at 300 (user-last2-request: an overrun is corrected to the request's end)."""
    run = run_script(
        nodes(1, cpu=4),
        [
            (0, submit(job("first").tasks(1, cpu=4).user("ann").walltime(1000).build())),
            (100, exited("first")),
            (200, submit(job("p").tasks(1, cpu=4).user("ann").walltime(1000).at(200).build())),
        ],
        runtime_prediction="user-last2-request",
    )
    assert run.core.jobs["p"].est_end == 300
    return run


def test_a_prediction_past_the_new_limit_is_cut_to_it() -> None:
    run = predicted_run()
    run.step(210, JobUpdateRequested("p", walltime_s=50))
    rec = run.core.jobs["p"]
    assert (rec.est_end, rec.estimate) == (250, 50)


def test_a_prediction_below_both_limits_stays_and_is_corrected_to_the_new_one() -> None:
    run = predicted_run()
    run.step(210, JobUpdateRequested("p", walltime_s=3000))
    assert run.core.jobs["p"].est_end == 300  # the prediction still stands
    run.step(301)  # outlived it: corrected to the request's end, the new one
    assert run.core.jobs["p"].est_end == 3200


def test_an_estimate_corrected_to_the_old_limit_moves_to_the_new_one() -> None:
    run = predicted_run()
    run.step(301)
    assert run.core.jobs["p"].est_end == 1200  # corrected to the old request's end
    run.step(310, JobUpdateRequested("p", walltime_s=3000))
    assert run.core.jobs["p"].est_end == 3200
