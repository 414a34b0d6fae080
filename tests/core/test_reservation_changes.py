"""Changing an advance reservation in the core (``ReservationSet(..., replaces=True)``,
``scontrol update reservation``): running jobs are not touched; the reservation's waiting
jobs follow its new window, nodes and people (rejected when they are no longer admitted or
no longer fit on its nodes); other jobs get the constraints of the new window."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import exited, job, make_core, nodes, run_script, submit
from fusesched.core.reservation_changes import ReservationConflict
from fusesched.model.events import JobExited, ReservationSet
from fusesched.model.job import JobSpec
from fusesched.model.phases import JobPhase
from fusesched.model.reservation import Reservation

FOUR = nodes(4, cpu=4)  # n0..n3


def proj(
    on: tuple[str, ...] = ("n0", "n1"),
    start: float = 100,
    end: float = 200,
    users: tuple[str, ...] = ("alice", "bob"),
    change: bool = False,
) -> ReservationSet:
    return ReservationSet(Reservation("p", on, start, end, users=users), replaces=change)


def into_p(job_id: str, tasks: int = 1, walltime: float = 50, user: str = "alice") -> JobSpec:
    spec = job(job_id).tasks(tasks, cpu=4).walltime(walltime).build()
    return replace(spec, reservation="p", user=user)


def test_a_later_start_sends_an_eligible_job_back_to_wait() -> None:
    run = run_script(
        FOUR,
        [
            (0, submit(job("b").tasks(2, cpu=4).walltime(500).build())),  # n0, n1 busy
            (1, proj(start=0, end=1000)),
            (2, submit(into_p("in"))),
        ],
    )
    assert "in" not in run.start_times()  # eligible, but its nodes are busy
    run.step(3, proj(start=600, end=1000, change=True))
    run.step(500, exited("b"))
    assert "in" not in run.start_times()  # it waits for the new start
    assert run.core.next_wakeup() == 600
    run.step(600, [])
    assert run.start_times()["in"] == 600


def test_an_earlier_start_lets_its_jobs_start_at_once() -> None:
    run = run_script(FOUR, [(0, proj()), (1, submit(into_p("in")))])
    run.step(10, proj(start=10, change=True))
    assert run.start_times() == {"in": 10}
    assert set(run.starts()["in"].nodes) <= {"n0", "n1"}


def test_a_longer_window_keeps_a_job_the_old_end_would_have_rejected() -> None:
    run = run_script(
        FOUR,
        [
            (0, submit(job("b").tasks(2, cpu=4).walltime(300).build())),
            (1, proj()),
            (2, submit(into_p("in"))),
        ],
    )
    run.step(150, proj(end=400, change=True))
    run.step(200, [])
    assert run.rejected() == {}
    run.step(300, exited("b"))
    assert run.start_times()["in"] == 300


def test_fewer_nodes_reject_the_jobs_that_no_longer_fit_and_running_ones_run_on() -> None:
    run = run_script(
        FOUR,
        [
            (0, proj(start=0)),
            (1, submit(into_p("run", tasks=1, walltime=150))),  # on n0
            (2, submit(into_p("two", tasks=2), into_p("one", tasks=1))),
        ],
    )
    assert set(run.start_times()) == {"run", "one"}  # (two waits for both nodes)
    run.step(3, submit(into_p("wait", tasks=1)))  # both nodes busy: it waits
    run.step(4, proj(on=("n0",), start=0, change=True))
    assert run.rejected() == {
        "two": "reservation p changed: the job does not fit on its nodes: task group 'main' "
        "needs 2 tasks of {'cpu': '4'} but the whole cluster holds at most 1"
    }
    assert run.phase("run") is JobPhase.RUNNING and run.phase("one") is JobPhase.RUNNING
    assert run.phase("wait") is JobPhase.QUEUED  # fits on n0: waits for it
    run.step(151, exited("run"))
    assert run.start_times()["wait"] == 151 and set(run.starts()["wait"].nodes) == {"n0"}


def test_people_no_longer_listed_lose_their_waiting_jobs() -> None:
    run = run_script(FOUR, [(0, proj()), (1, submit(into_p("a"), into_p("b", user="bob")))])
    run.step(2, proj(users=("alice",), change=True))
    assert run.rejected() == {
        "b": "reservation p changed: user 'bob' (tenant 'default') may not use reservation p"
    }
    run.step(3, proj(users=(), change=True))  # now a maintenance window
    assert run.rejected()["a"] == (
        "reservation p changed: reservation p is a maintenance reservation: no job runs in it"
    )


def test_newly_reserved_nodes_keep_their_running_jobs_and_others_keep_off() -> None:
    run = run_script(
        FOUR,
        [
            (0, proj()),
            (1, submit(job("r").tasks(2, cpu=4).walltime(1000).build())),  # n2, n3
        ],
    )
    assert set(run.starts()["r"].nodes) == {"n2", "n3"}
    run.step(2, proj(on=("n0", "n1", "n2", "n3"), change=True))
    run.step(3, submit(job("w").tasks(1, cpu=4).walltime(1000).build()))
    assert run.phase("r") is JobPhase.RUNNING and run.stopped() == []
    assert "w" not in run.start_times()  # every node is now reserved from 100 to 200
    run.step(200, [])
    assert run.start_times()["w"] == 200


def test_changes_are_checked_as_creations_are() -> None:
    core = make_core(FOUR)
    with pytest.raises(KeyError, match="unknown reservation 'p'"):
        core.handle(proj(change=True), 0)
    core.handle(proj(), 0)
    core.handle(ReservationSet(Reservation("m", ("n2",), 100, 200)), 0)
    with pytest.raises(ReservationConflict, match="overlaps reservation 'm' on n2"):
        core.handle(proj(on=("n1", "n2"), change=True), 0)
    core.handle(proj(on=("n1",), start=50, end=300, change=True), 0)  # (not with itself)
    assert core.bookings is not None and core.bookings.by_name["p"].nodes == ("n1",)
    with pytest.raises(KeyError, match="or it has ended"):
        core.handle(proj(end=400, change=True), 300)


def test_the_planner_sees_the_new_window() -> None:
    """A changed window moves the head's promise with it."""
    run = run_script(
        FOUR,
        [
            (0, submit(job("b").tasks(1, cpu=4).walltime(50).build())),
            (1, ReservationSet(Reservation("m", ("n0", "n1"), 100, 200))),
            (1, submit(job("h").tasks(4, cpu=4).walltime(500).build())),
        ],
    )
    assert run.reservations()[-1] == ("h", 200)
    run.step(2, ReservationSet(Reservation("m", ("n0", "n1"), 100, 300), replaces=True))
    assert run.reservations()[-1] == ("h", 300)


# ============================================================================ found in review


def test_a_requeued_job_waits_for_its_reservations_new_start() -> None:
    """A job of the reservation runs when its start is moved later; requeued, it waits for
    the new start like any of its waiting jobs (it restarted at once before)."""
    run = run_script(FOUR, [(0, proj(start=0, end=1000)), (1, submit(into_p("in", walltime=500)))])
    assert run.start_times()["in"] == 1
    run.step(2, proj(start=600, end=1000, change=True))
    run.step(10, JobExited("in", exit_code=1, reason="bad", requeue=True))
    assert run.phase("in") is JobPhase.QUEUED
    assert run.core.next_wakeup() == 600
    run.step(599, [])
    assert run.phase("in") is JobPhase.QUEUED
    run.step(600, [])
    assert run.phase("in") is JobPhase.RUNNING


def test_a_requeued_job_whose_user_was_dropped_is_rejected() -> None:
    run = run_script(
        FOUR, [(0, proj(start=0, end=1000)), (1, submit(into_p("in", walltime=500, user="bob")))]
    )
    run.step(2, proj(start=0, end=1000, users=("alice",), change=True))
    assert run.phase("in") is JobPhase.RUNNING  # (running jobs are not touched)
    run.step(10, JobExited("in", exit_code=1, reason="bad", requeue=True))
    assert run.rejected() == {
        "in": "requeued, but user 'bob' (tenant 'default') may not use reservation p"
    }
