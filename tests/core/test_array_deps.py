"""Dependencies on a whole job array (``afterok:arr``) and ``aftercorr`` in the core: each
kind's success and failure paths, a failing member, a cancelled array (before and after it
started), members that ended before a restart (``ArrayRecalled``), and the cost of a large
array (one pass over its members, not one per event per waiting job)."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest

from builders import Run, cancel, exited, job, make_core, node, run_script, submit
from fusesched.core import array_deps
from fusesched.core.pending_reasons import waiting_reasons
from fusesched.core.scheduler import SchedulerCore
from fusesched.model.events import (
    AdoptedTask,
    ArrayRecalled,
    Decision,
    JobAdopted,
    JobExited,
    JobHoldRequested,
    JobReleaseRequested,
)
from fusesched.model.job import ArraySpec, Dependency, DependencyKind, JobSpec
from fusesched.model.phases import JobPhase

AFTER, OK, NOT_OK = DependencyKind.AFTER, DependencyKind.AFTER_OK, DependencyKind.AFTER_NOT_OK
ANY, CORR = DependencyKind.AFTER_ANY, DependencyKind.AFTER_CORR

BIG = [node("n0").cpu(16).build()]


def spec(job_id: str, *deps: Dependency, cpu: int = 1) -> JobSpec:
    return replace(job(job_id).tasks(1, cpu=cpu).walltime(100).build(), dependencies=deps)


def array(job_id: str, last: int, *deps: Dependency, first: int = 0, cpu: int = 1) -> JobSpec:
    built = job(job_id).tasks(1, cpu=cpu).walltime(100).array(first, last).build()
    return replace(built, dependencies=deps)


def on(kind: DependencyKind, job_id: str = "arr") -> Dependency:
    return Dependency(kind, job_id)


def reason(run: Run, job_id: str) -> str:
    return run.core.jobs[job_id].history[-1].reason


# ============================================================================ the model


def test_aftercorr_waits_as_afterok() -> None:
    assert {p for p in JobPhase if CORR.met(p)} == {JobPhase.COMPLETED}
    assert {p for p in JobPhase if CORR.broken(p)} == {p for p in JobPhase if OK.broken(p)}


# ============================================================================ whole array


def test_afterok_waits_for_every_member_to_complete() -> None:
    run = run_script(BIG, [(0, submit(array("arr", 2), spec("red", on(OK)))), (5, [])])
    assert run.phase("red") is JobPhase.PENDING
    assert run.core.jobs["red"].waiting_on == {"arr"}
    assert waiting_reasons(run.core)["red"] == "Dependency: job arr"
    run.step(10, exited("arr_0"), exited("arr_2"))
    assert run.phase("red") is JobPhase.PENDING  # arr_1 still runs
    run.step(20, exited("arr_1"))
    assert run.start_times()["red"] == 20
    assert run.core.jobs["red"].history[0].reason == "dependencies met (array arr ended)"


def test_afterok_is_broken_by_the_first_failing_member() -> None:
    run = run_script(BIG, [(0, submit(array("arr", 2), spec("red", on(OK))))])
    run.step(10, exited("arr_1", code=3))  # the others still run: no need to wait for them
    assert run.rejected() == {"red": "dependency arr (array): arr_1 failed"}
    assert run.phase("arr_0") is JobPhase.RUNNING
    run.step(20, exited("arr_0"), exited("arr_2"))
    assert "red" not in run.start_times()


@pytest.mark.parametrize(
    ("codes", "starts"), [((0, 4, 0), True), ((0, 0, 0), False), ((1, 1, 1), True)]
)
def test_afternotok_once_all_ended_and_one_failed(codes: tuple[int, ...], starts: bool) -> None:
    run = run_script(BIG, [(0, submit(array("arr", 2), spec("fix", on(NOT_OK))))])
    run.step(10, exited("arr_1", code=codes[1]))
    assert run.phase("fix") is JobPhase.PENDING  # whatever arr_1 did: the others run on
    run.step(20, exited("arr_0", code=codes[0]), exited("arr_2", code=codes[2]))
    if starts:
        assert run.start_times()["fix"] == 20
    else:
        assert run.rejected() == {
            "fix": "dependency arr (array): every member completed, afternotok can never be met"
        }


def test_afterany_once_every_member_ended_however() -> None:
    run = run_script(BIG, [(0, submit(array("arr", 2), spec("tidy", on(ANY))))])
    run.step(10, exited("arr_0", code=9), exited("arr_1", timed_out=True, code=1))
    assert run.phase("tidy") is JobPhase.PENDING
    run.step(20, exited("arr_2"))
    assert run.start_times()["tidy"] == 20


def test_after_once_every_member_started() -> None:
    one = [node("n0").cpu(2).mem("1Gi").build()]  # room for two members at a time
    run = run_script(
        one,
        [
            (
                0,
                submit(
                    array("arr", 2),
                    replace(
                        spec("mon", on(AFTER)),
                        task_groups=job("m").tasks(1, mem="1Mi").build().task_groups,
                    ),
                ),
            )
        ],
    )
    assert set(run.starts()) == {"arr_0", "arr_1"}
    assert run.phase("mon") is JobPhase.PENDING  # arr_2 waits for room
    run.step(10, exited("arr_0", code=1))
    assert run.start_times()["arr_2"] == 10
    assert run.start_times()["mon"] == 10  # met in the cycle arr_2 started
    assert run.core.jobs["mon"].history[0].reason == "dependencies met (array arr started)"


def test_after_is_met_by_members_cancelled_before_they_started() -> None:
    one = [node("n0").cpu(1).build()]
    run = run_script(one, [(0, submit(array("arr", 2), spec("mon", on(AFTER))))])
    assert list(run.starts()) == ["arr_0"]
    run.step(5, cancel("arr_1"), cancel("arr_2"))
    assert run.phase("mon") is JobPhase.QUEUED  # every member started or ended


def test_a_cancelled_array_breaks_afterok_and_meets_afterany() -> None:
    deps = [spec("ok", on(OK)), spec("any", on(ANY)), spec("notok", on(NOT_OK))]
    run = run_script(BIG, [(0, submit(array("arr", 1), *deps))])
    run.step(5, cancel("arr_0"), cancel("arr_1"))  # running: stopped, then they exit
    assert run.phase("ok") is JobPhase.PENDING
    run.step(6, exited("arr_0", code=143), exited("arr_1", code=143))
    assert run.rejected() == {"ok": "dependency arr (array): arr_0 cancelled"}
    assert run.start_times() == {"arr_0": 0, "arr_1": 0, "any": 6, "notok": 6}


def test_an_array_cancelled_before_it_started() -> None:
    run = run_script(
        [node("n0").cpu(2).build()],
        [
            (0, submit(spec("blk", cpu=2))),
            (1, submit(array("arr", 1), spec("ok", on(OK)), spec("any", on(ANY)))),
        ],
    )
    run.step(2, cancel("arr_0"), cancel("arr_1"))
    assert run.rejected() == {"ok": "dependency arr (array): arr_0 cancelled"}
    assert run.phase("any") is JobPhase.QUEUED  # (it waits for room behind blk)


def test_a_dependency_on_an_array_that_already_ended() -> None:
    run = run_script(BIG, [(0, submit(array("arr", 1))), (5, exited("arr_0")), (6, [])])
    run.step(7, exited("arr_1", code=2))
    run.step(8, submit(spec("ok", on(OK)), spec("any", on(ANY)), spec("notok", on(NOT_OK))))
    assert run.rejected() == {"ok": "dependency arr (array): arr_1 failed"}
    assert run.start_times()["any"] == 8 and run.start_times()["notok"] == 8


def test_a_requeued_member_is_waited_for_until_it_ends() -> None:
    run = run_script(BIG, [(0, submit(array("arr", 1), spec("red", on(OK))))])
    run.step(5, JobExited("arr_0", exit_code=1, requeue=True))  # back to the queue
    run.step(6, exited("arr_1"))
    assert run.phase("red") is JobPhase.PENDING
    assert run.start_times()["arr_0"] == 5  # started again
    run.step(9, exited("arr_0"))
    assert run.start_times()["red"] == 9


def test_an_unknown_array_is_refused() -> None:
    run = run_script(BIG, [(0, submit(spec("red", on(OK, "nope"))))])
    assert run.rejected() == {"red": "dependency on unknown job 'nope'"}


def test_dependents_of_dependents_are_settled_in_turn() -> None:
    """map → (reduce, an array afterok on map) → report afterok on reduce: one failure in
    map cancels the chain."""
    jobs = [array("map", 1), array("red", 1, on(OK, "map")), spec("report", on(OK, "red"))]
    run = run_script(BIG, [(0, submit(*jobs))])
    run.step(5, exited("map_0", code=1))
    assert set(run.rejected()) == {"red_0", "red_1", "report"}
    assert run.rejected()["report"] == "dependency red (array): red_0 cancelled"


def test_a_throttled_array_with_held_members() -> None:
    """``%1``: one member at a time; ``after`` waits for the last to start, ``afterok`` for
    the last to end, through a member held and released on the way."""
    throttled = replace(array("arr", 2), array=ArraySpec(0, 2, max_parallel=1))
    run = run_script(BIG, [(0, submit(throttled, spec("mon", on(AFTER)), spec("red", on(OK))))])
    run.step(1, JobHoldRequested("arr_2", "by hand"), exited("arr_0"))
    run.step(2, exited("arr_1"))
    assert run.phase("mon") is JobPhase.PENDING  # arr_2 is held: it has not started
    run.step(3, JobReleaseRequested("arr_2"))
    assert run.start_times()["arr_2"] == run.start_times()["mon"] == 3
    run.step(4, exited("arr_2"))
    assert run.start_times()["red"] == 4


def test_a_waiting_job_cancelled_is_forgotten() -> None:
    run = run_script(BIG, [(0, submit(array("arr", 1), spec("red", on(OK)), spec("any", on(ANY))))])
    run.step(1, cancel("red"))
    out = run.step(2, exited("arr_0", code=1), exited("arr_1"))
    assert [d.job_id for d in out] == ["any"]  # nothing for red: neither a start nor a reject
    assert run.core._dependents == {}


def test_singleton_and_a_whole_array() -> None:
    first = replace(spec("s1"), name="nightly")
    second = replace(spec("s2", Dependency(DependencyKind.SINGLETON, ""), on(OK)), name="nightly")
    run = run_script(BIG, [(0, submit(first, array("arr", 1), second))])
    assert run.core.jobs["s2"].waiting_on == {"s1", "arr"}
    run.step(1, exited("arr_0"), exited("arr_1"))
    assert run.phase("s2") is JobPhase.PENDING  # s1 still runs
    run.step(2, exited("s1"))
    assert run.start_times()["s2"] == 2


# ============================================================================ aftercorr


def test_aftercorr_pairs_members_of_the_same_index() -> None:
    run = run_script(BIG, [(0, submit(array("arr", 2), array("post", 2, on(CORR))))])
    assert {run.phase(f"post_{i}") for i in range(3)} == {JobPhase.PENDING}
    assert run.core.jobs["post_1"].waiting_on == {"arr_1"}
    run.step(10, exited("arr_1"))
    assert run.start_times()["post_1"] == 10
    run.step(20, exited("arr_0", code=2))
    assert run.rejected() == {"post_0": "dependency arr_0 ended failed"}
    assert run.phase("post_2") is JobPhase.PENDING


def test_aftercorr_on_members_that_already_ended() -> None:
    run = run_script(
        BIG, [(0, submit(array("arr", 1))), (5, [exited("arr_0"), exited("arr_1", 1)])]
    )
    run.step(6, submit(array("post", 1, on(CORR))))
    assert run.start_times()["post_0"] == 6
    assert run.rejected() == {"post_1": "dependency arr_1 did not succeed"}


def test_aftercorr_without_a_partner_waits_on_the_whole_array() -> None:
    """As Slurm: a job that is no array member, or a member whose index the other array
    lacks, waits as afterok on the whole array."""
    run = run_script(
        BIG, [(0, submit(array("arr", 1), spec("one", on(CORR)), array("post", 2, on(CORR))))]
    )
    assert run.core.jobs["one"].waiting_on == {"arr"}
    assert run.core.jobs["post_2"].waiting_on == {"arr"}  # arr has no index 2
    run.step(10, exited("arr_0"))
    assert run.start_times()["post_0"] == 10
    run.step(20, exited("arr_1"))
    assert {j: t for j, t in run.start_times().items() if t == 20} == {
        "post_1": 20,
        "one": 20,
        "post_2": 20,
    }


def test_aftercorr_between_arrays_of_different_steps() -> None:
    """``arr`` has indices 0, 2, 4, 6: post_2 pairs with arr_2; post_1 and post_3, whose
    indices arr lacks, wait on the whole array."""
    stepped = replace(array("arr", 6), array=ArraySpec(0, 6, 2))
    run = run_script(BIG, [(0, submit(stepped, array("post", 3, on(CORR))))])
    assert [run.core.jobs[f"post_{i}"].waiting_on for i in range(4)] == [
        {"arr_0"},
        {"arr"},
        {"arr_2"},
        {"arr"},
    ]
    run.step(1, exited("arr_2"))
    run.step(2, exited("arr_0"), exited("arr_4"), exited("arr_6"))
    posts = {j: t for j, t in run.start_times().items() if j.startswith("post")}
    assert posts == {"post_2": 1, "post_0": 2, "post_1": 2, "post_3": 2}


def test_aftercorr_on_a_job_that_is_no_array_is_afterok() -> None:
    run = run_script(BIG, [(0, submit(spec("a"), array("post", 1, on(CORR, "a"))))])
    run.step(10, exited("a", code=1))
    assert run.rejected() == {
        "post_0": "dependency a ended failed",
        "post_1": "dependency a ended failed",
    }


# ============================================================================ restarts


def test_members_that_ended_before_a_restart_are_recalled() -> None:
    """A restarted core holds the members still to end (5_1, 5_2); the controller recalls
    the ones that ended (5_0 completed) before it hands over the waiting jobs."""
    arr = ArraySpec(0, 2)
    members = [replace(m, submit_time=0) for m in array("5", 2).expand_array()]
    core = make_core(BIG)
    core.step(0, submit(members[1], members[2]))  # (recovered one by one)
    core.step(1, [ArrayRecalled("5", arr, {"5_0": JobPhase.COMPLETED})])
    out = core.step(2, submit(spec("red", on(OK, "5")), array("post", 2, on(CORR, "5"))))
    assert [d.job_id for d in out if type(d).__name__ == "StartJob"] == ["post_0"]
    assert core.jobs["red"].waiting_on == {"5"}
    core.step(3, [exited("5_1"), exited("5_2")])
    assert core.jobs["red"].phase is JobPhase.RUNNING


def test_a_recalled_failure_breaks_afterok() -> None:
    core = make_core(BIG)
    core.step(
        0,
        [ArrayRecalled("5", ArraySpec(0, 1), {"5_0": JobPhase.COMPLETED, "5_1": JobPhase.TIMEOUT})],
    )
    out = core.step(1, submit(spec("red", on(OK, "5")), spec("any", on(ANY, "5"))))
    assert [(d.job_id, getattr(d, "reason", "")) for d in out] == [
        ("red", "dependency 5 (array): 5_1 timeout"),
        ("any", ""),
    ]


def test_a_recall_after_the_tally_counts_once() -> None:
    """A second account of the same members (two submissions before the core took the
    first) changes nothing."""
    core = make_core(BIG)
    core.step(0, submit(array("5", 1).expand_array()[1]))
    recall = ArrayRecalled("5", ArraySpec(0, 1), {"5_0": JobPhase.FAILED})
    core.step(1, [recall])
    core.step(2, submit(spec("fix", on(NOT_OK, "5"))))
    core.step(3, [recall])
    assert core.arrays.tallies["5"].unended == {"5_1"}
    core.step(4, [exited("5_1")])
    assert core.jobs["fix"].phase is JobPhase.RUNNING


def test_adopted_members_count_as_started() -> None:
    """A member running at the restart may be adopted after a job waiting on the array was
    handed over: it counts as started then."""
    members = array("5", 1).expand_array()
    core = make_core([node("n0").cpu(2).build()])
    core.step(0, submit(members[1], spec("mon", on(AFTER, "5"))))
    assert core.jobs["5_1"].phase is JobPhase.RUNNING
    assert core.jobs["mon"].phase is JobPhase.PENDING  # 5_0 is not known yet
    core.step(1, [JobAdopted(members[0], (AdoptedTask("main", "n0"),), 0.5)])
    assert core.jobs["mon"].phase is JobPhase.QUEUED  # (no room left beside them)
    assert core.jobs["mon"].waiting_on == set()


def test_a_member_that_cannot_be_adopted_counts_as_cancelled() -> None:
    members = array("5", 1).expand_array()
    core = make_core([node("n0").cpu(2).build()])
    core.step(0, submit(members[1], spec("tidy", on(ANY, "5"))))
    out = core.step(1, [JobAdopted(members[0], (AdoptedTask("main", "gone"),), 0.5)])
    assert [type(d).__name__ for d in out] == ["StopJob"]  # (its node is unknown)
    assert core.arrays.tallies["5"].unended == {"5_1"}
    core.step(2, [exited("5_1")])
    assert core.jobs["tidy"].phase is JobPhase.RUNNING


# ============================================================================ cost


def test_a_large_array_is_counted_once_not_per_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """20,000 members and 200 jobs waiting on the array: the waiting jobs are looked at
    when the tally decides something (here: the last start, the last end), not at each
    member's end — so a member's end costs the same whether 1 or 200 jobs wait."""
    looks: list[str] = []
    settle = array_deps.settle_waiters

    def counted(core: SchedulerCore, array_id: str, now: float, what: str) -> list[Decision]:
        looks.append(what)
        return settle(core, array_id, now, what)

    monkeypatch.setattr(array_deps, "settle_waiters", counted)
    arr = replace(job("big").tasks(1, mem="1Mi").walltime(100).array(0, 19_999).build())
    core = make_core([node("n0").cpu(1).mem("1Ti").build()])
    core.step(0, submit(arr))
    core.step(1, submit(*(spec(f"w{i}", on(OK, "big")) for i in range(200))))
    core.step(2, [exited(f"big_{i}") for i in range(19_999)])
    assert len(core._dependents["big"]) == 200 and looks == []
    core.step(3, [exited("big_19999")])
    assert looks == ["ended"] and "big" not in core._dependents
    assert {core.jobs[f"w{i}"].phase for i in range(200)} <= {JobPhase.QUEUED, JobPhase.RUNNING}


def test_a_tally_keeps_no_table_once_its_sets_are_empty() -> None:
    """A Python set emptied by removals keeps its table: the tally's sets are made anew
    once empty, so an array whose members all started and ended weighs next to nothing
    (an array of a million members would keep 64 MB, and every such array its own)."""
    arr = job("big").tasks(1, mem="1Mi").walltime(100).array(0, 4_999).build()
    core = make_core([node("n0").cpu(1).mem("1Ti").build()])
    core.step(0, submit(arr, spec("w", on(OK, "big"))))  # (counted before any started)
    tally = core.arrays.tallies["big"]
    assert not tally.unstarted and len(tally.unended) == 5_000
    assert sys.getsizeof(tally.unstarted) == sys.getsizeof(set())
    core.step(1, [exited(f"big_{i}") for i in range(5_000)])
    assert core.jobs["w"].phase is JobPhase.RUNNING
    assert sys.getsizeof(tally.unended) == sys.getsizeof(set())
