"""A waiting job's new name, partition (queue), dependencies and begin time in the core
(``JobUpdateRequested`` → core/intake.py ``update``, core/job_rewire.py), as Slurm's
``scontrol update JobId=… Name=… Partition=… Dependency=… StartTime=…``; a running job may
change its name only (and its time limit: tests/core/test_relimit.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.builders import exited, job, node, run_script, submit
from tests.core.test_tenancy_core import core_with, gjob, started, tenancy

from fusesched.model.events import Event, JobHoldRequested, JobReleaseRequested
from fusesched.model.events import JobUpdateRequested as Update
from fusesched.model.job import Dependency, DependencyKind, JobSpec, Placement
from fusesched.model.phases import JobPhase

ONE = [node("n0").cpu(4).build()]
AFTER_OK, AFTER_ANY = DependencyKind.AFTER_OK, DependencyKind.AFTER_ANY
SINGLETON = (Dependency(DependencyKind.SINGLETON),)


def whole(job_id: str, name: str = "", singleton: bool = False, **fields: object) -> JobSpec:
    """A job of user ann that takes the whole node for 50 s (a ``singleton`` of its name)."""
    spec = job(job_id).tasks(1, cpu=4).walltime(50).user("ann").build()
    fields.setdefault("dependencies", SINGLETON if singleton else ())
    return replace(spec, name=name, **fields)  # type: ignore[arg-type]


def blocker() -> list[Event]:
    return submit(whole("blk"))


def test_a_queued_job_is_renamed_and_keeps_its_place() -> None:
    run = run_script(ONE, [(0, blocker()), (1, submit(whole("a"), whole("b")))])
    run.step(2, Update("a", name="renamed"))
    assert run.core.jobs["a"].spec.name == "renamed" and run.phase("a") is JobPhase.QUEUED
    run.step(50, exited("blk"))
    assert "a" in run.starts() and "b" not in run.starts()


def test_new_dependencies_make_a_queued_job_wait_and_none_let_it_go() -> None:
    run = run_script(ONE, [(0, blocker()), (1, submit(whole("a"), whole("b")))])
    run.step(2, Update("a", dependencies=(Dependency(AFTER_OK, "b"),)))
    rec = run.core.jobs["a"]
    assert (rec.phase, rec.waiting_on) == (JobPhase.PENDING, {"b"})
    run.step(50, exited("blk"))
    assert list(run.starts()) == ["blk", "b"]  # a waits for b now
    run.step(60, Update("a", dependencies=()))  # cleared: it queues again
    assert (rec.phase, rec.waiting_on, rec.spec.dependencies) == (JobPhase.QUEUED, set(), ())
    assert run.core._dependents.get("b") is None  # (b no longer holds it)
    run.step(100, exited("b"))
    assert run.start_times()["a"] == 100


def test_a_dependency_already_met_lets_the_job_queue_at_once() -> None:
    waits = (Dependency(AFTER_OK, "blk"),)
    run = run_script(ONE, [(0, blocker()), (1, submit(whole("a", dependencies=waits)))])
    assert run.phase("a") is JobPhase.PENDING
    run.step(2, Update("a", dependencies=(Dependency(AFTER_ANY, "blk"),)))
    run.step(3, exited("blk"))
    assert run.start_times()["a"] == 3


def test_a_held_job_given_dependencies_waits_for_them_once_released() -> None:
    run = run_script(
        ONE,
        [(0, blocker()), (1, submit(whole("a"), whole("b"))), (2, JobHoldRequested("a"))],
    )
    run.step(3, Update("a", dependencies=(Dependency(AFTER_OK, "b"),)))
    rec = run.core.jobs["a"]
    assert (rec.phase, rec.held, rec.waiting_on) == (JobPhase.PENDING, "held by user", {"b"})
    run.step(4, JobReleaseRequested("a"))
    assert rec.phase is JobPhase.PENDING  # still waits for b
    run.step(50, exited("blk"))
    run.step(100, exited("b"))
    assert run.start_times() == {"blk": 0, "b": 50, "a": 100}


@pytest.mark.parametrize(
    ("deps", "says"),
    [
        ((Dependency(AFTER_OK, "nope"),), "dependency on unknown job 'nope'"),
        ((Dependency(AFTER_OK, "a"),), "job a cannot depend on itself"),
        ((Dependency(AFTER_OK, "b"),), "circular dependency: job b waits on job a"),
        ((Dependency(AFTER_OK, "bad"),), "dependency bad did not succeed"),
        (SINGLETON, "a singleton dependency needs a job name"),
    ],
)
def test_dependencies_a_submission_would_be_refused_change_nothing(
    deps: tuple[Dependency, ...], says: str
) -> None:
    b = job("b").tasks(1, cpu=4).walltime(50).after_ok("a").build()
    bad = job("bad").tasks(1, cpu=1).walltime(5).build()
    run = run_script(ONE, [(0, submit(bad)), (1, exited("bad", 1))])
    run.step(2, blocker())
    run.step(3, submit(whole("a"), b))
    with pytest.raises(ValueError, match=says):
        run.core.handle(Update("a", dependencies=deps, priority=9), 4)
    rec = run.core.jobs["a"]
    assert (rec.phase, rec.spec.dependencies, rec.spec.priority) == (JobPhase.QUEUED, (), 0)
    assert rec.waiting_on == set() and run.core.queue.position(rec) is not None


def test_a_later_begin_time_keeps_a_queued_job_back_and_now_lets_it_go() -> None:
    run = run_script(ONE, [(0, submit(whole("a", begin_time=1000.0)))])
    assert run.starts() == {}
    run.step(10, Update("a", begin_time=10.0))  # StartTime=now
    assert run.start_times() == {"a": 10}
    run = run_script(ONE, [(0, blocker()), (1, submit(whole("b")))])
    run.step(2, Update("b", begin_time=500.0))
    run.step(50, exited("blk"))
    assert "b" not in run.starts()
    assert run.core.next_wakeup() == 500
    run.step(500, [])
    assert run.start_times()["b"] == 500


def test_a_job_moved_to_another_queue_takes_that_queues_quota() -> None:
    core = core_with(tenancy({"full": (2, None, None), "free": (4, None, None)}, None), gpus=8)
    assert started(core.step(0, submit(gjob("f1", "full", 2)))) == ["f1"]
    core.step(1, submit(gjob("w", "full", 2)))
    assert core.jobs["w"].phase is JobPhase.QUEUED  # its queue's quota is used up
    with pytest.raises(ValueError, match="unknown queue 'nope'"):
        core.handle(Update("w", queue="nope"), 2)
    assert started(core.step(2, [Update("w", queue="free")])) == ["w"]
    assert core.jobs["w"].spec.queue == "free"


def test_a_new_placement_comes_with_a_new_queue_and_must_fit() -> None:
    nodes = [node(f"{pool}0").cpu(4).label("pool", pool).build() for pool in "ab"]
    on_a = Placement(node_selector={"pool": "a"})
    spec = job("j").tasks(1, cpu=4).walltime(50).selector(pool="a").build()
    run = run_script(nodes, [(0, submit(whole("blk", placement=on_a))), (1, submit(spec))])
    assert run.phase("j") is JobPhase.QUEUED  # pool a is busy
    with pytest.raises(ValueError, match="the whole cluster holds at most 0"):
        run.core.handle(Update("j", queue="q", placement=Placement(node_selector={"pool": "c"})), 2)
    run.step(2, Update("j", queue="other", placement=Placement(node_selector={"pool": "b"})))
    assert run.start_times()["j"] == 2
    assert run.core.jobs["j"].spec.queue == "other"


def test_a_running_job_changes_its_name_only() -> None:
    run = run_script(ONE, [(0, blocker())])
    run.step(1, Update("blk", name="renamed", queue="default"))  # its own partition: no move
    assert run.core.jobs["blk"].spec.name == "renamed"
    for change in (
        Update("blk", queue="other"),
        Update("blk", dependencies=()),
        Update("blk", begin_time=100.0),
    ):
        with pytest.raises(ValueError, match=r"is running: its .* cannot change"):
            run.core.handle(change, 2)


def test_renaming_a_job_frees_the_singletons_of_its_old_name() -> None:
    run = run_script(ONE, [(0, submit(whole("r", "x"))), (1, submit(whole("s", "x", True)))])
    assert run.core.jobs["s"].waiting_on == {"r"}
    run.step(2, Update("r", name="y"))  # running: it is no namesake of s any more
    assert (run.phase("s"), run.core.jobs["s"].waiting_on) == (JobPhase.QUEUED, set())
    run.step(50, exited("r"))
    assert run.start_times()["s"] == 50


def test_a_job_renamed_to_a_singletons_name_is_waited_for() -> None:
    later = whole("s", "x", True, submit_time=1.0)
    run = run_script(ONE, [(0, submit(whole("r", "y"))), (1, submit(later))])
    assert run.phase("s") is JobPhase.QUEUED  # no other x: it waits for room only
    run.step(2, Update("r", name="x"))  # r was submitted first: s waits for it now
    assert (run.phase("s"), run.core.jobs["s"].waiting_on) == (JobPhase.PENDING, {"r"})
    run.step(50, exited("r"))
    assert run.start_times()["s"] == 50


def test_a_singleton_renamed_waits_for_the_jobs_of_its_new_name() -> None:
    run = run_script(
        ONE,
        [
            (0, submit(whole("x1", "x"), whole("z1", "z"))),
            (1, submit(whole("s", "x", True))),
        ],
    )
    assert run.core.jobs["s"].waiting_on == {"x1"}
    run.step(2, Update("s", name="z"))
    assert run.core.jobs["s"].waiting_on == {"z1"} and "x1" not in run.core._dependents
    assert run.core._named[("x", "ann")] == ["x1"]  # (x1 counted again among the x jobs)
    run.step(50, exited("x1"))
    assert run.start_times()["z1"] == 50 and "s" not in run.starts()
    run.step(100, exited("z1"))
    assert run.start_times()["s"] == 100


def test_a_singleton_whose_dependencies_are_cleared_gives_back_its_namesakes() -> None:
    run = run_script(ONE, [(0, submit(whole("x1", "x"))), (1, submit(whole("s", "x", True)))])
    run.step(2, Update("s", dependencies=()))
    assert run.phase("s") is JobPhase.QUEUED
    run.step(3, submit(whole("t", "x", True)))  # a new singleton of x waits for both
    assert run.core.jobs["t"].waiting_on == {"x1", "s"}


def test_a_name_that_would_close_a_circle_is_refused() -> None:
    later = whole("s", "x", True, submit_time=1.0)
    waits = (Dependency(AFTER_OK, "s"),)
    run = run_script(ONE, [(0, blocker()), (1, submit(later, whole("r", "y", dependencies=waits)))])
    assert run.core.jobs["r"].waiting_on == {"s"}
    with pytest.raises(ValueError, match="circular dependency: job s, a singleton of the name"):
        run.core.handle(Update("r", name="x"), 2)  # s would wait for r, which waits for s
    assert run.core.jobs["r"].spec.name == "y" and run.core.jobs["s"].waiting_on == set()


# ---------------------------------------------------------------------- review fixes

TWO_ARRAYS = [job(a).tasks(1, cpu=4).walltime(50).array(0, 1).build() for a in ("7", "8")]


def test_a_circle_through_a_whole_array_is_refused() -> None:
    run = run_script(ONE, [(0, blocker()), (1, submit(TWO_ARRAYS[0], whole("x")))])
    run.step(2, Update("7_1", dependencies=(Dependency(AFTER_OK, "x"),)))
    with pytest.raises(ValueError, match="circular dependency"):  # x → 7 (7_1) → x
        run.core.handle(Update("x", dependencies=(Dependency(AFTER_OK, "7"),)), 3)
    assert run.core.jobs["x"].waiting_on == set() and run.phase("x") is JobPhase.QUEUED


def test_a_circle_through_an_aftercorr_partner_is_refused_and_only_that() -> None:
    corr = (Dependency(DependencyKind.AFTER_CORR, "7"),)
    run = run_script(ONE, [(0, blocker()), (1, submit(*TWO_ARRAYS))])
    run.step(2, Update("7_1", dependencies=(Dependency(AFTER_OK, "8_1"),)))
    with pytest.raises(ValueError, match="circular dependency"):  # 8_1 → 7_1 → 8_1
        run.core.handle(Update("8_1", dependencies=corr), 3)
    run.step(4, Update("8_0", dependencies=corr))  # 8_0 pairs with 7_0, which waits on none
    assert run.core.jobs["8_0"].waiting_on == {"7_0"}


def test_a_singleton_is_refused_where_an_earlier_namesake_waits_on_it() -> None:
    early = whole("e", "x", submit_time=1.0)
    run = run_script(ONE, [(0, blocker()), (1, submit(early, whole("r", "x", submit_time=2.0)))])
    run.step(3, Update("e", dependencies=(Dependency(AFTER_OK, "r"),)))
    with pytest.raises(ValueError, match="circular dependency"):  # r would wait on e
        run.core.handle(Update("r", dependencies=SINGLETON), 4)
    assert run.core.jobs["r"].waiting_on == set() and run.core.jobs["r"].spec.dependencies == ()


def test_a_singleton_renamed_is_refused_where_a_namesake_of_its_new_name_waits_on_it() -> None:
    early = whole("e", "x", submit_time=1.0)
    run = run_script(
        ONE, [(0, blocker()), (1, submit(early, whole("r", "y", True, submit_time=2.0)))]
    )
    run.step(3, Update("e", dependencies=(Dependency(AFTER_OK, "r"),)))
    with pytest.raises(ValueError, match="circular dependency"):  # as x, r would wait on e
        run.core.handle(Update("r", name="x"), 4)
    assert run.core.jobs["r"].spec.name == "y"


THREE = [node(f"n{k}").cpu(4).build() for k in range(3)]


@pytest.mark.parametrize("change", [{"name": "y"}, {"dependencies": ()}])
def test_a_singleton_that_stops_being_one_leaves_the_later_ones_behind_what_it_stood_for(
    change: dict[str, object],
) -> None:
    x1, r = whole("x1", "x"), whole("r", "x", True, submit_time=1.0)
    s = whole("s", "x", True, submit_time=2.0)
    run = run_script(THREE, [(0, submit(x1)), (1, submit(r)), (2, submit(s))])
    assert run.core.jobs["s"].waiting_on == {"r"}  # (r stands for x1)
    run.step(3, Update("r", **change))  # type: ignore[arg-type]
    assert run.phase("s") is JobPhase.PENDING and "x1" in run.core.jobs["s"].waiting_on
    run.step(4, exited("r"))  # (r ran beside x1: it is no singleton of x any more)
    assert run.phase("s") is JobPhase.PENDING  # x1 still runs
    run.step(50, exited("x1"))
    assert run.start_times()["s"] == 50


def throttled() -> JobSpec:
    return job("7").tasks(1, cpu=4).walltime(50).array(0, 3, max_parallel=2).build()


def test_an_update_keeps_a_throttled_array_members_place() -> None:
    run = run_script(ONE, [(0, submit(throttled()))])  # 7_0 runs, 7_1 queued, 7_2 7_3 held
    held = run.core._array_held["7"]
    assert [r.id for r in held] == ["7_2", "7_3"]
    run.step(1, Update("7_1", priority=100))
    run.step(2, Update("7_2", priority=50))
    assert [r.id for r in run.core.queue.records] == ["7_1"]
    assert [r.id for r in held] == ["7_2", "7_3"] and run.core._array_running["7"] == 2
    run.step(50, exited("7_0"))
    assert run.start_times()["7_1"] == 50


@pytest.mark.parametrize(
    "change", [{"dependencies": (Dependency(AFTER_OK, "7_3"),)}, {"begin_time": 1000.0}]
)
def test_a_throttled_member_an_update_takes_out_of_the_queue_gives_its_slot_on(
    change: dict[str, object],
) -> None:
    run = run_script(ONE, [(0, submit(throttled()))])
    run.step(1, Update("7_1", **change))  # type: ignore[arg-type]
    assert [r.id for r in run.core.queue.records] == ["7_2"]
    assert [r.id for r in run.core._array_held["7"]] == ["7_3"]
    assert run.core._array_running["7"] == 2
