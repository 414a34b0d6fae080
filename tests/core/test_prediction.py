"""Runtime prediction in the core: learned only from finished jobs, corrected, never a kill."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from tests.builders import Run, cancel, exited, job, make_core, nodes, run_script, submit

from fusesched.core.prediction import Predictions
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import JobSubmitted, ReserveJob, StartJob, StopJob
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


# ----------------------------------------------------------------------------- re-prediction


def _waiting_script() -> Run:
    """Two CPUs. a (ann) and x (bob) run; b (ann, two CPUs) waits behind them; x ends after
    50 s, y (bob) backfills into its CPU; a ends after 100 s while b still waits."""
    return run_script(
        nodes(1, cpu=2),
        [
            (0, submit(spec("a"), spec("x", user="bob"))),
            (1, submit(job("b").tasks(2, cpu=1).user("ann").walltime(1000.0).at(1).build())),
            (50, [exited("x")]),
            (60, submit(spec("y", user="bob", at=60))),
        ],
        runtime_prediction="user-last2-request",
    )


def test_a_waiting_jobs_estimate_follows_its_users_history() -> None:
    """b was predicted at submission (ann had no history: the request). Bob's exit changes
    nothing of it; a's exit (ann's first finished job, 100 s) re-predicts it, to exactly what a
    fresh prediction gives then — from jobs finished before that moment only."""
    run = _waiting_script()
    core = run.core
    b = core.jobs["b"]
    assert run.phase("b") is JobPhase.QUEUED and run.phase("y") is JobPhase.RUNNING
    assert b.estimate == b.facts.estimate == 1000.0  # bob's exit (x) did not touch it
    assert core.predictions is not None and core.predictions.repredicted == 0
    run.step(100, [exited("a")])
    assert run.phase("b") is JobPhase.QUEUED  # y still holds a CPU
    assert b.estimate == b.facts.estimate == 100.0
    assert b.estimate == core.predictions.estimate(b.spec)  # a fresh prediction, now
    assert core.queue.rows[0, 0] == 100.0  # what backfilling reads
    assert core.predictions.repredicted == 1
    assert run.reservations()[-1] == ("b", 110.0)  # y's predicted end (bob: x ran 50 s)


def test_repredicted_jobs_are_rekeyed_in_a_static_order() -> None:
    """SJF: c (ann, asks 900 s) waits behind d (bob, asks 500 s); when ann's first job ends
    after 100 s, c's estimate falls to 100 s and it moves ahead of d."""
    run = run_script(
        nodes(1, cpu=1),
        [
            (0, submit(spec("a"))),
            (1, submit(spec("c", walltime=900.0, at=1), spec("d", user="bob", walltime=500.0))),
        ],
        queue_order="sjf",
        runtime_prediction="user-last2",
    )
    queue = run.core.queue
    assert [r.id for r in queue.records] == ["d", "c"]
    run.step(100, [exited("a")])  # c starts at once: it is first now
    assert run.start_times()["c"] == 100.0 and run.core.jobs["c"].estimate == 100.0
    assert [r.id for r in queue.records] == ["d"]


def _check_queue(core: SchedulerCore) -> None:
    predictions = core.predictions
    assert predictions is not None
    queue = core.queue
    for i, rec in enumerate(queue.records):
        assert rec.estimate == rec.facts.estimate == queue.rows[i, 0]
        assert rec.estimate == predictions.estimate(rec.spec)  # never stale
    if not core.order.dynamic:
        keys = [(r.key, r.seq) for r in queue.records]
        assert keys == sorted(keys)
        assert all(r.key == core.order.key(r.facts, 0.0) for r in queue.records)


@pytest.mark.parametrize("order", ["sjf", "f1", "wfp3-textbook", "learned"])
@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_waiting_estimates_are_always_fresh_predictions(order: str, backfill: str) -> None:
    """A random workload stepped by hand: after every step, every queued job's estimate (its
    record, its facts, its queue row, its place in a static order) is what a fresh prediction
    gives at that moment; a predictor that saw a job before it ended would fail the run."""
    rng = np.random.default_rng(11)
    run = Run(
        make_core(
            nodes(4, cpu=4),
            queue_order=order,
            backfill=backfill,
            runtime_prediction="user-last2-request",
        )
    )
    core = run.core
    ended: set[str] = set()
    predictions = core.predictions
    assert predictions is not None
    observe = predictions.predictor.observe

    def checked_observe(spec_: JobSpec, runtime: float) -> None:
        assert spec_.id in ended  # learned only from a job that has ended
        observe(spec_, runtime)

    predictions.predictor.observe = checked_observe  # type: ignore[method-assign]
    runtimes: dict[str, float] = {}
    events: list[tuple[float, int, str, str]] = []  # (time, order, kind, job id)
    for i in range(150):
        runtime = float(rng.integers(5, 400))
        runtimes[str(i)] = runtime
        heapq.heappush(events, (float(i * 7), i, "submit", str(i)))
    seq = 1000
    specs = {
        jid: job(jid)
        .tasks(int(rng.integers(1, 9)), cpu=1)
        .user(f"u{int(rng.integers(0, 4))}")
        .walltime(runtimes[jid] * float(rng.uniform(1.0, 6.0)))
        .at(float(int(jid) * 7))
        .build()
        for jid in runtimes
    }
    while events:
        now = events[0][0]
        batch = []
        while events and events[0][0] == now:
            _, _, kind, jid = heapq.heappop(events)
            if kind == "submit":
                batch.append(JobSubmitted(specs[jid]))
            else:
                ended.add(jid)
                batch.append(exited(jid))
        for decision in run.step(now, batch):
            if isinstance(decision, StartJob):
                seq += 1
                heapq.heappush(
                    events, (now + runtimes[decision.job_id], seq, "end", decision.job_id)
                )
        _check_queue(core)
    assert all(rec.phase is JobPhase.COMPLETED for rec in core.jobs.values())
    assert predictions.repredicted > 0


def test_a_job_cancelled_or_rejected_before_it_ran_is_forgotten() -> None:
    """The per-user index of waiting jobs does not keep jobs that will never run (a
    long-running controller would otherwise grow with every cancelled job)."""
    core = make_core(nodes(1, cpu=2), queue_order="sjf", runtime_prediction="user-last2")
    big = job("big").tasks(1, cpu=2).walltime(1000).user("u").at(0).build()
    waiting = job("w").tasks(1, cpu=2).walltime(1000).user("u").at(0).build()
    core.step(0, submit(big, waiting))
    core.step(1, [cancel("w")])
    assert core.predictions is not None
    assert "w" not in core.predictions._by_user.get("u", {})
