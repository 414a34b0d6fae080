"""Runtime prediction in the core: learned only from finished jobs, corrected, never a kill."""

from __future__ import annotations

import numpy as np
import pytest
from tests.builders import Run, cancel, exited, job, nodes, run_script, submit

from fusesched.core.prediction import Predictions
from fusesched.model.events import ReserveJob, StartJob, StopJob
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase
from fusesched.policies.registry import CoreConfig, PolicyError
from fusesched.policies.runtime_prediction import RUNTIME_PREDICTORS, UserRecent, make_predictor
from fusesched.sim.engine import SimJob, Simulation


def spec(job_id: str, user: str = "ann", walltime: float = 1000.0, at: float = 0.0) -> JobSpec:
    return job(job_id).user(user).walltime(walltime).at(at).build()


# ----------------------------------------------------------------------------- the predictor


@pytest.mark.parametrize(
    ("history", "walltime", "expected"),
    [
        ([], 1000.0, 1000.0),  # no history: the request
        ([100.0], 1000.0, 100.0),
        ([100.0, 300.0], 1000.0, 200.0),  # mean of the last two
        ([5000.0, 100.0, 300.0], 1000.0, 200.0),  # older ones forgotten
        ([4000.0, 6000.0], 1000.0, 1000.0),  # capped by the request
        ([0.0, 0.0], 1000.0, 1.0),  # never below one second
    ],
)
def test_user_recent_predicts_the_mean_of_the_last_two(
    history: list[float], walltime: float, expected: float
) -> None:
    predictor = UserRecent(2)
    for runtime in history:
        predictor.observe(spec("old"), runtime)
    assert predictor.predict(spec("new"), walltime) == expected


def test_histories_are_per_user_and_unknown_users_share_none() -> None:
    predictor = UserRecent(2)
    predictor.observe(spec("a", user="ann"), 10.0)
    predictor.observe(spec("b", user=""), 10.0)  # an unknown user (SWF -1) learns nothing
    assert predictor.predict(spec("c", user="bob"), 500.0) == 500.0
    assert predictor.predict(spec("d", user=""), 500.0) == 500.0
    assert predictor.predict(spec("e", user="ann"), 500.0) == 10.0


def test_registry_and_config_check() -> None:
    assert make_predictor("none") is None
    assert set(RUNTIME_PREDICTORS) >= {"none", "user-last2", "user-last2-request"}
    with pytest.raises(PolicyError, match="runtime-prediction"):
        CoreConfig(runtime_prediction="oracle")
    with pytest.raises(ValueError, match="window"):
        UserRecent(0)
    with pytest.raises(ValueError, match="correction"):
        Predictions(UserRecent(2), "halve", 3600.0)


# ----------------------------------------------------------------------------- in the core


def test_prediction_learns_only_from_jobs_that_have_finished() -> None:
    """b is submitted while a still runs: it gets the request; c, after a ended, the
    prediction from a's real run time. Nothing from the future (a's true length) leaks."""
    run = run_script(
        nodes(2, cpu=1),
        [
            (0, submit(spec("a"))),
            (10, submit(spec("b", at=10))),
            (100, [exited("a")]),
            (150, submit(spec("c", at=150))),
        ],
        runtime_prediction="user-last2",
    )
    jobs = run.core.jobs
    assert jobs["a"].estimate == 1000.0
    assert jobs["b"].estimate == 1000.0
    assert jobs["c"].estimate == 100.0
    assert jobs["c"].facts.estimate == 100.0  # shortest-first orders by the prediction


def test_cancelled_jobs_teach_nothing() -> None:
    """A job stopped by its user says nothing of how long it would have run."""
    run = run_script(
        nodes(1, cpu=1),
        [(0, submit(spec("a"))), (2, [cancel("a")]), (3, [exited("a", code=143)])],
        runtime_prediction="user-last2",
    )
    assert run.phase("a") is JobPhase.CANCELLED
    run.step(4, submit(spec("b", at=4)))
    assert run.core.jobs["b"].estimate == 1000.0
    run.step(9, [exited("b")])  # b completed after 5 s: that is learned
    run.step(10, submit(spec("c", at=10)))
    assert run.core.jobs["c"].estimate == 5.0


def _learned_core(runtime: float, correction: str) -> Run:
    """A core whose user ann has one finished job of ``runtime`` seconds, then job x of
    ann starts at t=10 on the only node, predicted ``runtime`` s, requested 1000 s."""
    name = "user-last2" if correction == "double" else "user-last2-request"
    run = run_script(
        nodes(1, cpu=1),
        [(0, submit(spec("a"))), (runtime, [exited("a")]), (10 + runtime, submit(spec("x")))],
        runtime_prediction=name,
    )
    return run


@pytest.mark.parametrize(
    ("correction", "ends"),
    [
        ("double", [20.0 + 20.0, 20.0 + 40.0, 20.0 + 80.0, 20.0 + 160.0, 20.0 + 320.0]),
        ("request", [20.0 + 1000.0]),
    ],
)
def test_an_overrun_prediction_is_extended_never_killed(correction: str, ends: list[float]) -> None:
    run = _learned_core(10.0, correction)
    core = run.core
    rec = core.jobs["x"]
    assert rec.start_time == 20.0 and rec.est_end == 30.0  # predicted 10 s
    seen = []
    while True:
        due = core.next_wakeup()
        if due is None:
            break
        out = run.step(due)
        assert not any(isinstance(d, StopJob) for d in out)  # a prediction never kills
        seen.append(rec.est_end)
    assert seen[: len(ends)] == ends
    assert rec.est_end == 1020.0  # at last the request's end
    assert rec.phase is JobPhase.RUNNING
    assert core.predictions is not None and core.predictions.corrected == len(seen)


def test_the_corrected_estimate_moves_the_head_reservation() -> None:
    """x (predicted 10 s, request 1000 s) holds the node; y waits with a reservation at x's
    predicted end; when x outlives it, y's reservation moves later."""
    run = _learned_core(10.0, "request")
    run.step(25.0, submit(spec("y", user="bob", at=25.0)))
    assert run.reservations()[-1] == ("y", 30.0)
    run.step(30.0)
    assert run.reservations()[-1] == ("y", 1020.0)
    assert [d.job_id for _, d in run.decisions if isinstance(d, ReserveJob)].count("y") == 2


def test_running_set_reestimate_keeps_orders_consistent() -> None:
    run = _learned_core(10.0, "request")
    core = run.core
    run.step(30.0)
    view = core.running.view()
    assert view.ends.tolist() == [1020.0]
    assert core.running.release_time(0, 1) == (1020.0, 1000)


def test_prediction_is_deterministic_and_changes_the_schedule() -> None:
    rng = np.random.default_rng(7)
    jobs = []
    for i in range(300):
        runtime = float(rng.integers(10, 2000))
        size = int(rng.integers(1, 9))
        user = f"u{int(rng.integers(0, 6))}"
        request = runtime * float(rng.uniform(1.0, 8.0))
        spec_i = (
            job(str(i)).tasks(size, cpu=1).user(user).walltime(request).at(float(i * 30)).build()
        )
        jobs.append(SimJob(spec_i, runtime))
    cluster = nodes(16, cpu=1)

    def starts(prediction: str) -> list[float]:
        config = CoreConfig(queue_order="sjf", backfill="easy", runtime_prediction=prediction)
        result = Simulation(cluster, jobs, config).run()
        return [o.start for o in result.outcomes]

    first = starts("user-last2")
    assert first == starts("user-last2")
    assert first != starts("none")
    for o in (
        Simulation(cluster, jobs, CoreConfig(queue_order="sjf", runtime_prediction="user-last2"))
        .run()
        .outcomes
    ):
        assert o.end - o.start == pytest.approx(o.runtime)  # every job ran its full time


def test_start_decisions_unchanged_without_prediction() -> None:
    run = run_script(nodes(1, cpu=1), [(0, submit(spec("a")))])
    assert isinstance(run.decisions[0][1], StartJob)
    assert run.core.predictions is None and run.core.next_wakeup() is None
