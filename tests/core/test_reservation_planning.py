"""Advance reservations in the backfill planner: the EASY head's shadow time, the
conservative profile and the expected starts see a window as capacity that a job outside it
cannot use (unless its time limit ends it before the window opens), and a reservation's own
job as having only its nodes until its end. Without a reservation nothing changes (the
schedule digests of bench/schedule_digest.py check that)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import Run, exited, job, make_core, nodes, run_script, submit
from fusesched.core.forecast import forecast
from fusesched.model.events import JobSubmitted, ReservationSet
from fusesched.model.job import JobSpec
from fusesched.model.reservation import Reservation

FOUR = nodes(4, cpu=4)  # n0..n3
INF = float("inf")


def maint(
    on: tuple[str, ...] = ("n0", "n1"), start: float = 100, end: float = 200
) -> ReservationSet:
    return ReservationSet(Reservation("m", on, start, end))


def proj(
    on: tuple[str, ...] = ("n0", "n1"), start: float = 100, end: float = 200
) -> ReservationSet:
    return ReservationSet(Reservation("p", on, start, end, users=("alice",)))


def whole(job_id: str, tasks: int, walltime: float | None) -> JobSpec:
    return job(job_id).tasks(tasks, cpu=4).walltime(walltime).build()


def into_p(spec: JobSpec) -> JobSpec:
    return replace(spec, reservation="p", user="alice")


def announced(run: Run, job_id: str) -> float:
    """The head's last announced start (its shadow time); inf: none announced."""
    said = [t for j, t in run.reservations() if j == job_id]
    return said[-1] if said else INF


# (what, script after the blockers, the head's id, its shadow time: before, with the fix)
SHADOWS = [
    (
        # 4 nodes wanted, 2 kept in maintenance from 100 to 200: the head waits for the end
        # (it used to get no reservation at all: the head was planned on the nodes it may
        # use now, found never to fit, and everything could overtake it)
        "whole cluster after a maintenance window",
        [(0, submit(whole("b", 1, 50))), (1, maint()), (1, submit(whole("h", 4, 500)))],
        "h",
        200.0,
    ),
    (
        "a head that ends before the window starts gets the reserved nodes",
        [(0, submit(whole("b", 1, 50))), (1, maint()), (1, submit(whole("h", 4, 40)))],
        "h",
        50.0,
    ),
    (
        "ending exactly at the window's start is too late",
        [(0, submit(whole("b", 1, 50))), (1, maint()), (1, submit(whole("h", 4, 50)))],
        "h",
        200.0,
    ),
    (
        "no limit: kept off until the end",
        [(0, submit(whole("b", 1, 50))), (1, maint()), (1, submit(whole("h", 4, None)))],
        "h",
        200.0,
    ),
    (
        "nodes outside the window suffice: unchanged",
        [
            (0, submit(whole("b", 2, 50))),  # (on n0, n1)
            (1, maint(on=("n2", "n3"))),
            (1, submit(whole("h", 2, 500))),
        ],
        "h",
        50.0,
    ),
    (
        # a one-task head (its sums decide where no reservation bears on it): free for it
        # at 60 by the sums, but at 60 it would run into the window on n0, the only node
        # that frees up; it used to be promised 60
        "a head the sums would place on a reserved node",
        [
            (0, submit(whole("x", 1, 60), whole("b", 3, 500))),
            (1, maint(on=("n0",))),
            (1, submit(whole("h", 1, 50))),
        ],
        "h",
        200.0,
    ),
    (
        "a reservation's job: its nodes, inside its window",
        [
            (0, submit(whole("b", 2, 150))),
            (1, proj()),
            (1, submit(into_p(whole("h", 2, 30)))),
            (100, []),
        ],
        "h",
        150.0,
    ),
    (
        # its nodes are busy past its end: it can never start (it is rejected at the end),
        # so it holds nothing back (it used to be promised 250, after its window)
        "a reservation's job whose nodes free up only after the end",
        [
            (0, submit(whole("b", 2, 250))),
            (1, proj()),
            (1, submit(into_p(whole("h", 2, 30)))),
            (100, []),
        ],
        "h",
        INF,
    ),
]


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
@pytest.mark.parametrize(("what", "script", "head", "shadow"), SHADOWS, ids=[s[0] for s in SHADOWS])
def test_the_heads_announced_start_respects_the_windows(
    backfill: str, what: str, script: list, head: str, shadow: float
) -> None:
    run = run_script(FOUR, script, backfill=backfill)
    assert head not in run.start_times(), what
    assert announced(run, head) == shadow, what


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_a_long_job_no_longer_overtakes_a_head_waiting_for_the_windows_end(backfill: str) -> None:
    """The head (all four nodes, long) waits for the maintenance window on n0, n1 to end; a
    long one-node job submitted after it would run on n2 past 200, delaying the head: it
    waits for the head now (it used to start at once, and the head at 301)."""
    run = run_script(
        FOUR,
        [
            (0, submit(whole("b", 1, 50))),  # on n0 until 50
            (1, maint()),
            (1, submit(whole("h", 4, 500), whole("c", 1, 300))),
        ],
        backfill=backfill,
    )
    assert "c" not in run.start_times()
    run.step(50, exited("b"))
    run.step(200, [])
    assert run.start_times()["h"] == 200
    run.step(700, exited("h"))
    assert run.start_times()["c"] == 700


def test_short_jobs_still_fill_the_nodes_before_the_head_and_the_window() -> None:
    run = run_script(
        FOUR,
        [
            (0, submit(whole("b", 1, 50))),
            (1, maint()),
            (1, submit(whole("h", 4, 500), whole("s", 2, 90))),
        ],
    )
    # s (ends at 91, before both the window and the head's start) runs at once, on n0, n1
    assert run.start_times()["s"] == 1
    assert set(run.starts()["s"].nodes) <= {"n0", "n1", "n2"}
    assert announced(run, "h") == 200


@pytest.mark.parametrize("backfill", ["easy", "conservative"])
def test_expected_starts_are_later_for_the_overtaker_and_come_true(backfill: str) -> None:
    """``fusesched jobs --start`` (forecast): c is expected after the head now — later than
    the projection used to say (at once) — and the core, run with every job taking its
    time limit, starts every job when it said."""
    core = make_core(FOUR, backfill=backfill)
    core.step(0, [JobSubmitted(whole("b", 1, 50))])
    core.step(1, [maint(), JobSubmitted(whole("h", 4, 500))])
    core.handle(JobSubmitted(whole("c", 1, 300)), 2)  # (no cycle yet: the projection's first)
    expected = {s.job_id: s.start for s in forecast(core, 2).jobs}
    assert expected == {"h": 200.0, "c": 700.0}
    run = Run(core)
    run.step(2, [])
    run.step(50, exited("b"))
    run.step(200, [])
    run.step(700, exited("h"))
    assert run.start_times() == expected


def test_a_job_past_its_estimated_end_counts_as_ending_now() -> None:
    """(As without reservations: the head is promised now, not the next end.)"""
    run = run_script(
        FOUR,
        [
            (0, submit(whole("b", 1, 50), whole("x", 1, 500))),  # on n0 and n1
            (1, maint(on=("n2",), start=1000, end=1100)),
            (60, submit(whole("h", 3, 30))),  # b overran its estimate: h is due at 60
        ],
    )
    assert announced(run, "h") == 60.0
