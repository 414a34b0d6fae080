"""Dependency kinds beyond ``afterok``/``afterany`` in the core: ``after`` (the other job
started), ``afternotok`` (it ended in failure) and ``singleton`` (the earlier jobs of the same
name and user ended) — their success and failure paths, arrays, and the simulator."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from builders import Run, cancel, exited, job, make_core, node, run_script, simulate, submit
from fusesched.model.events import JobExited
from fusesched.model.job import Dependency, DependencyKind, JobSpec
from fusesched.model.phases import JobPhase
from fusesched.policies.registry import CoreConfig
from fusesched.sim.engine import SimJob, replay

AFTER = DependencyKind.AFTER
NOT_OK = DependencyKind.AFTER_NOT_OK
SINGLETON = Dependency(DependencyKind.SINGLETON)

ONE = [node("n0").cpu(4).build()]


def spec(
    job_id: str,
    *deps: Dependency,
    cpu: int = 1,
    name: str = "",
    user: str = "",
    at: float = 0,
    walltime: float = 100,
) -> JobSpec:
    """A one-task job of ``cpu`` CPUs with ``deps``."""
    built = job(job_id).tasks(1, cpu=cpu).walltime(walltime).at(at).build()
    return replace(built, dependencies=deps, name=name, user=user)


def on(kind: DependencyKind, *job_ids: str) -> tuple[Dependency, ...]:
    return tuple(Dependency(kind, j) for j in job_ids)


def reason(run: Run, job_id: str) -> str:
    return run.core.jobs[job_id].history[-1].reason


# ============================================================================ the model


def test_a_dependency_names_a_job_unless_it_is_a_singleton() -> None:
    with pytest.raises(ValueError, match="an after dependency needs the id of the job"):
        Dependency(AFTER)
    with pytest.raises(ValueError, match="a singleton dependency names no job"):
        Dependency(DependencyKind.SINGLETON, "1")


@pytest.mark.parametrize(
    ("kind", "met", "broken"),
    [
        (AFTER, {"running", "completed", "failed", "cancelled", "timeout"}, set()),
        (DependencyKind.AFTER_OK, {"completed"}, {"failed", "cancelled", "timeout"}),
        (NOT_OK, {"failed", "cancelled", "timeout"}, {"completed"}),
        (DependencyKind.AFTER_ANY, {"completed", "failed", "cancelled", "timeout"}, set()),
    ],
)
def test_what_each_kind_waits_for(kind: DependencyKind, met: set[str], broken: set[str]) -> None:
    assert {p.value for p in JobPhase if kind.met(p)} == met
    assert {p.value for p in JobPhase if kind.broken(p)} == broken


# ============================================================================ after


def test_after_starts_in_the_cycle_its_job_starts() -> None:
    run = run_script(ONE, [(0, submit(spec("a"), spec("b", *on(AFTER, "a"))))])
    assert run.start_times() == {"a": 0, "b": 0}  # no second event needed
    assert reason(run, "b") == "resources available"
    assert run.core.jobs["b"].history[0].reason == "dependencies met (a started)"
    assert run.core._dependents == {}


def test_after_waits_while_its_job_waits_for_room() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(spec("blk", cpu=4))),
            (1, submit(spec("a", cpu=4), spec("b", *on(AFTER, "a")))),
        ],
    )
    assert run.phase("a") is JobPhase.QUEUED
    assert run.phase("b") is JobPhase.PENDING
    run.step(50, exited("blk"))
    assert run.start_times() == {"blk": 0, "a": 50}  # b has no room beside a yet
    assert run.phase("b") is JobPhase.QUEUED
    run.step(60, exited("a", code=1))  # how a ends does not matter
    assert run.start_times()["b"] == 60


def test_after_chains_start_together() -> None:
    jobs = [spec("a"), spec("b", *on(AFTER, "a")), spec("c", *on(AFTER, "b"))]
    run = run_script(ONE, [(0, submit(*jobs))])
    assert run.start_times() == {"a": 0, "b": 0, "c": 0}


@pytest.mark.parametrize("phase", ["running", "ended"])
def test_after_on_a_job_that_already_started_or_ended(phase: str) -> None:
    script = [(0, submit(spec("a")))]
    if phase == "ended":
        script.append((5, [exited("a", code=3)]))
    script.append((6, submit(spec("b", *on(AFTER, "a")))))
    run = run_script(ONE, script)  # type: ignore[arg-type]
    assert run.start_times()["b"] == 6


def test_after_on_a_job_cancelled_before_it_started() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(spec("blk", cpu=4))),
            (1, submit(spec("a"), spec("b", *on(AFTER, "a")))),
            (2, cancel("a")),
        ],
    )
    assert run.phase("a") is JobPhase.CANCELLED
    assert run.phase("b") is JobPhase.QUEUED  # met: it waits for room only
    assert run.core.jobs["b"].history[-1].reason == "dependencies met (a cancelled)"


def test_after_with_another_dependency_on_the_same_job_waits_for_both() -> None:
    b = spec("b", *on(AFTER, "a"), *on(DependencyKind.AFTER_OK, "a"))
    run = run_script(ONE, [(0, submit(spec("a"), b))])
    assert run.phase("b") is JobPhase.PENDING  # a started, but afterok waits for its end
    run.step(10, exited("a"))
    assert run.start_times()["b"] == 10


def test_after_and_a_failed_afterok_on_the_same_job_rejects() -> None:
    b = spec("b", *on(AFTER, "a"), *on(DependencyKind.AFTER_OK, "a"))
    run = run_script(ONE, [(0, submit(spec("a"), b)), (10, exited("a", code=1))])
    assert run.rejected() == {"b": "dependency a ended failed"}


def test_after_a_requeued_job_waits_for_its_next_start() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(spec("a", cpu=2))),
            (5, [JobExited("a", exit_code=1, requeue=True, not_before=100)]),
            (6, submit(spec("b", *on(AFTER, "a"), cpu=2))),
        ],
    )
    assert run.phase("a") is JobPhase.QUEUED  # (requeued, waiting out its backoff)
    assert run.phase("b") is JobPhase.PENDING
    run.step(100)
    assert run.start_times() == {"a": 100, "b": 100}


def test_after_and_backfill_start_the_dependent_in_the_same_cycle() -> None:
    # the head (big) waits for room; a small job backfills and its `after` dependent too
    run = run_script(
        [node("n0").cpu(4).build()],
        [
            (0, submit(spec("run", cpu=2))),
            (
                1,
                submit(
                    spec("big", cpu=4),
                    spec("small", walltime=50),
                    spec("dep", *on(AFTER, "small"), walltime=50),
                ),
            ),
        ],
        backfill="easy",
    )
    assert run.start_times() == {"run": 0, "small": 1, "dep": 1}
    assert run.starts()["dep"].backfilled
    assert run.phase("big") is JobPhase.QUEUED


def test_after_through_the_tenancy_admission_starts_the_dependent_in_the_same_cycle() -> None:
    b = spec("b", *on(AFTER, "a"))
    run = run_script(ONE, [(0, submit(spec("a"), b))], queue_order="multifactor")
    assert run.core.tenants is not None  # (the multifactor order admits through the gate)
    assert run.start_times() == {"a": 0, "b": 0}


# ============================================================================ afternotok


@pytest.mark.parametrize(
    "ending",
    [exited("a", code=2), exited("a", timed_out=True), cancel("a")],
    ids=["failed", "timeout", "cancelled"],
)
def test_afternotok_runs_after_a_failure(ending: object) -> None:
    run = run_script(ONE, [(0, submit(spec("a"), spec("b", *on(NOT_OK, "a"))))])
    assert run.phase("b") is JobPhase.PENDING  # a runs: b waits for its end
    run.step(10, ending)  # type: ignore[arg-type]
    if not run.core.jobs["a"].phase.terminal:  # cancelling a running job stops it first
        run.step(11, exited("a", code=143))
    assert run.phase("b") is JobPhase.RUNNING
    assert run.rejected() == {}


def test_afternotok_is_rejected_when_its_job_completes() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(spec("a"), spec("b", *on(NOT_OK, "a")), spec("c", *on(AFTER, "b")))),
            (10, exited("a")),
        ],
    )
    assert run.rejected()["b"] == "dependency a completed: afternotok can never be met"
    assert run.phase("b") is JobPhase.CANCELLED
    assert run.start_times()["c"] == 10  # after: b ended (cancelled) without starting


@pytest.mark.parametrize(("code", "runs"), [(0, False), (1, True)])
def test_afternotok_on_a_job_that_already_ended(code: int, runs: bool) -> None:
    run = run_script(
        ONE,
        [
            (0, submit(spec("a"))),
            (10, exited("a", code=code)),
            (11, submit(spec("b", *on(NOT_OK, "a")))),
        ],
    )
    assert ("b" in run.starts()) is runs
    if not runs:
        assert run.rejected() == {"b": "dependency a completed: afternotok can never be met"}


def test_afternotok_on_a_rejected_job_runs() -> None:
    run = run_script(
        ONE,
        [(0, submit(spec("a", *on(DependencyKind.AFTER_OK, "nope")), spec("b", *on(NOT_OK, "a"))))],
    )
    assert list(run.rejected()) == ["a"]
    assert run.start_times() == {"b": 0}


def test_afternotok_and_afterok_on_different_jobs() -> None:
    jobs = [
        spec("train"),
        spec("report", *on(DependencyKind.AFTER_OK, "train")),
        spec("cleanup", *on(NOT_OK, "train")),
    ]
    ok = run_script(ONE, [(0, submit(*jobs)), (10, exited("train"))])
    assert set(ok.starts()) == {"train", "report"} and list(ok.rejected()) == ["cleanup"]
    failed = run_script(ONE, [(0, submit(*jobs)), (10, exited("train", code=1))])
    assert set(failed.starts()) == {"train", "cleanup"} and list(failed.rejected()) == ["report"]


# ============================================================================ arrays


def test_array_members_as_targets() -> None:
    arr = replace(job("arr").tasks(1, cpu=1).walltime(100).array(0, 1).build(), dependencies=())
    run = run_script(
        ONE,
        [
            (0, submit(spec("blk", cpu=3))),
            (1, submit(arr)),  # arr_0 runs, arr_1 waits for room
            (2, submit(spec("s", *on(AFTER, "arr_0", "arr_1")), spec("f", *on(NOT_OK, "arr_0")))),
        ],
    )
    assert run.phase("arr_1") is JobPhase.QUEUED
    assert run.phase("s") is JobPhase.PENDING  # arr_1 has not started
    run.step(10, exited("blk"))
    assert run.start_times()["arr_1"] == 10
    assert run.start_times()["s"] == 10
    run.step(20, exited("arr_0", code=4))
    assert run.start_times()["f"] == 20


def test_an_array_after_a_job_starts_its_members_with_it() -> None:
    arr = replace(
        job("arr").tasks(1, cpu=1).walltime(100).array(0, 2).build(),
        dependencies=on(AFTER, "a"),
    )
    run = run_script(ONE, [(0, submit(spec("a"), arr))])
    assert run.start_times() == {"a": 0, "arr_0": 0, "arr_1": 0, "arr_2": 0}


def test_a_throttled_array_after_a_job_keeps_its_throttle() -> None:
    arr = replace(
        job("arr").tasks(1, cpu=1).walltime(100).array(0, 2, max_parallel=1).build(),
        dependencies=on(AFTER, "a"),
    )
    run = run_script(ONE, [(0, submit(spec("a"), arr))])
    assert run.start_times() == {"a": 0, "arr_0": 0}
    run.step(5, exited("arr_0"))
    assert run.start_times()["arr_1"] == 5


# ============================================================================ singleton


def test_singleton_waits_for_the_earlier_jobs_of_its_name_and_user() -> None:
    run = run_script(
        [node("n0").cpu(8).build()],
        [
            (0, submit(spec("a", name="nightly", user="ann"))),
            (1, submit(spec("other", name="nightly", user="bob"))),  # another user's
            (2, submit(spec("x", name="weekly", user="ann"))),  # another name
            (3, submit(spec("b", SINGLETON, name="nightly", user="ann"))),
        ],
    )
    assert set(run.starts()) == {"a", "other", "x"}
    assert run.phase("b") is JobPhase.PENDING
    assert run.core.jobs["b"].waiting_on == {"a"}
    run.step(10, exited("a", code=1))  # however it ended
    assert run.start_times()["b"] == 10


def test_singleton_without_an_earlier_job_starts_at_once() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(spec("a", name="n", user="u"))),
            (5, exited("a")),
            (6, submit(spec("b", SINGLETON, name="n", user="u"))),
        ],
    )
    assert run.start_times()["b"] == 6


def test_singletons_run_one_at_a_time_in_submit_order() -> None:
    jobs = [spec(f"s{i}", SINGLETON, name="n", user="u", at=i) for i in range(3)]
    run = run_script([node("n0").cpu(8).build()], [(i, submit(j)) for i, j in enumerate(jobs)])
    assert list(run.starts()) == ["s0"]
    # on the last one before it, which waits on every earlier one
    assert run.core.jobs["s2"].waiting_on == {"s1"}
    assert run.core.jobs["s1"].waiting_on == {"s0"}
    run.step(10, exited("s0"))
    assert list(run.starts()) == ["s0", "s1"]
    run.step(20, cancel("s1"))
    run.step(21, exited("s1", code=143))
    assert run.start_times()["s2"] == 21


def test_a_singleton_does_not_wait_for_a_later_job() -> None:
    # submitted later (a larger submit time) but known to the core first: a job that ran
    # when a restarted controller recovers a singleton still waiting
    core = make_core(ONE)
    core.step(50, submit(spec("late", name="n", user="u", at=50)))
    core.step(51, submit(spec("early", SINGLETON, name="n", user="u", at=10)))
    assert core.jobs["early"].phase is JobPhase.RUNNING


def test_singleton_array_members_run_one_after_another() -> None:
    arr = replace(
        job("arr").tasks(1, cpu=1).walltime(100).array(0, 2).build(),
        dependencies=(SINGLETON,),
        name="sweep",
    )
    run = run_script([node("n0").cpu(8).build()], [(0, submit(arr))])
    assert list(run.starts()) == ["arr_0"]
    run.step(10, exited("arr_0"))
    run.step(20, exited("arr_1"))
    assert run.start_times() == {"arr_0": 0, "arr_1": 10, "arr_2": 20}


def test_a_big_singleton_array_waits_in_a_chain() -> None:
    """Each member waits on the one before it only (waiting on every earlier one made a
    10,000-member array cost about 50 million waits)."""
    arr = replace(
        job("big").tasks(1, cpu=1).walltime(100).array(0, 1999).build(),
        dependencies=(SINGLETON,),
        name="sweep",
    )
    core = make_core(ONE)
    core.step(0, submit(arr))
    waits = {j: r.waiting_on for j, r in core.jobs.items()}
    assert waits["big_0"] == set() and core.jobs["big_0"].phase is JobPhase.RUNNING
    assert all(waits[f"big_{i}"] == {f"big_{i - 1}"} for i in range(1, 2000))


def test_a_singleton_waits_on_namesakes_since_the_last_singleton() -> None:
    run = run_script(
        [node("n0").cpu(8).build()],
        [
            (0, submit(spec("s0", SINGLETON, name="n", user="u"))),
            (1, submit(spec("plain", name="n", user="u"))),  # not a singleton: runs at once
            (2, submit(spec("s1", SINGLETON, name="n", user="u"))),
        ],
    )
    assert run.core.jobs["s1"].waiting_on == {"s0", "plain"}
    run.step(10, exited("s0"))
    assert "s1" not in run.starts()  # plain still runs
    run.step(11, exited("plain"))
    assert run.start_times()["s1"] == 11


def test_a_singleton_with_an_after_on_its_namesake_waits_for_its_end() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(spec("a", name="n", user="u"))),
            (1, submit(spec("b", SINGLETON, *on(AFTER, "a"), name="n", user="u"))),
        ],
    )
    assert run.phase("b") is JobPhase.PENDING  # started, but the singleton waits for the end
    run.step(10, exited("a"))
    assert run.start_times()["b"] == 10


def test_a_singleton_without_a_name_is_rejected() -> None:
    run = run_script(ONE, [(0, submit(spec("b", SINGLETON)))])
    assert run.rejected() == {"b": "a singleton dependency needs a job name"}


# ============================================================================ the simulator


def test_the_simulator_replays_every_kind() -> None:
    def sim(job_spec: JobSpec, runtime: float, code: int = 0) -> SimJob:
        return SimJob(job_spec, runtime, code)

    jobs = [
        sim(spec("a", cpu=2, name="n", user="u"), 30, code=1),
        sim(spec("after", *on(AFTER, "a"), cpu=2), 10),
        sim(spec("notok", *on(NOT_OK, "a"), at=1), 10),
        sim(spec("never", *on(NOT_OK, "after"), at=1), 10),
        sim(spec("single", SINGLETON, name="n", user="u", at=2), 10),
    ]
    result = replay(ONE, jobs, CoreConfig())
    out = {o.job_id: o for o in result.outcomes}
    assert (out["a"].start, out["after"].start) == (0, 0)  # together
    assert (out["notok"].start, out["single"].start) == (30, 30)  # a failed at 30
    assert "afternotok can never be met" in out["never"].rejected
    assert math.isnan(out["never"].start)


def test_the_event_loop_driver_starts_after_dependents_with_their_job() -> None:
    jobs = [
        (spec("blk", cpu=4), 10.0),
        (spec("a", cpu=2, at=1), 20.0),
        (spec("b", *on(AFTER, "a"), at=1), 5.0),
    ]
    run = simulate(ONE, jobs)
    assert run.start_times() == {"blk": 0, "a": 10, "b": 10}  # not at a's end (30)
