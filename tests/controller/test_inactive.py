"""Slurm's InactiveLimit, the pure decision (controller/inactive.py): who is overdue given
when each attended job's holder was last heard from, how often to look and to ping."""

from __future__ import annotations

import pytest

from fusesched.controller.inactive import (
    INACTIVE_LIMIT,
    MAX_CHECK_S,
    MAX_PING_S,
    MIN_PING_S,
    Holders,
    Silent,
    check_every,
    ended_by_limit,
    ping_every,
    reason,
)


def test_a_holder_silent_longer_than_the_limit_is_overdue() -> None:
    holders = Holders(300)
    holders.heard("1", 1000.0)
    holders.heard("2", 1100.0)
    assert holders.overdue(1300.0) == []  # exactly the limit: not yet
    assert holders.overdue(1305.0) == [Silent("1", 305.0)]  # (the next check: 5 s later)
    assert holders.knows("1")  # (until the caller ends it and forgets it)
    holders.forget("1")
    assert holders.overdue(1401.0) == [Silent("2", 301.0)]


def test_a_ping_restarts_the_count() -> None:
    holders = Holders(10)  # checks every 2.5 s
    holders.heard("7", 0.0)
    holders.heard("7", 8.0)
    assert holders.overdue(15.0) == []
    assert holders.overdue(18.5) == [Silent("7", 10.5)]


def test_an_older_ping_arriving_late_does_not_move_the_count_back() -> None:
    holders = Holders(10)
    holders.heard("7", 8.0)
    holders.heard("7", 3.0)
    assert holders.overdue(17.0) == []


def test_the_longest_silence_comes_first() -> None:
    holders = Holders(5)
    for job, at in (("a", 4.0), ("b", 1.0), ("c", 2.0)):
        holders.heard(job, at)
    assert [s.job_id for s in holders.overdue(20.0)] == ["b", "c", "a"]


def test_holders_are_looked_at_once_per_check_interval() -> None:
    holders = Holders(8)  # checks every 2 s
    holders.heard("1", 0.0)
    assert holders.overdue(1.0) == [] and not holders.due(2.9)
    assert holders.due(3.0)
    assert holders.overdue(9.0) == [Silent("1", 9.0)]
    assert holders.overdue(10.0) == []  # not due: looked at again from 11 s
    assert holders.overdue(11.0) == [Silent("1", 11.0)]  # (still watched: not forgotten)


def test_off_keeps_nothing_and_ends_nobody() -> None:
    holders = Holders(0)
    holders.heard("1", 0.0)
    assert not holders.on and len(holders) == 0 and not holders.knows("1")
    assert not holders.due(1e9) and holders.overdue(1e9) == []


@pytest.mark.parametrize(
    ("limit", "ping"),
    [(300, MAX_PING_S), (30, 6.0), (2, 0.4), (0.5, MIN_PING_S), (0, MAX_PING_S)],
)
def test_holders_ping_five_times_within_the_limit(limit: float, ping: float) -> None:
    assert ping_every(limit) == pytest.approx(ping)


def test_the_controller_checks_four_times_within_the_limit_at_most_every_five_seconds() -> None:
    assert check_every(2) == 0.5
    assert check_every(300) == MAX_CHECK_S


def test_the_reason_says_who_went_silent_and_for_how_long() -> None:
    said = reason(305.4, 300, running=True)
    assert said == (
        "InactiveLimit: the salloc/run holding the allocation stopped answering for 305 s "
        "(the controller's --inactive-limit is 300 s)"
    )
    assert "waiting for the allocation" in reason(3, 2, running=False)
    assert ended_by_limit(said) and said.startswith(INACTIVE_LIMIT)
    assert not ended_by_limit("walltime exceeded") and not ended_by_limit("cancelled by user")
