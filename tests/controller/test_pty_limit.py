"""A terminal job's InactiveLimit (controller/inactive.py): the shorter of the controller's and
30 s, and 30 s when the controller's is off, as ``srun --pty``'s job ends when srun goes."""

from __future__ import annotations

from fusesched.controller.inactive import PTY_LIMIT_S, Holders, limit_for


def test_a_terminal_jobs_limit_is_short_whatever_the_controllers() -> None:
    assert limit_for(300, pty=True) == PTY_LIMIT_S
    assert limit_for(2, pty=True) == 2
    assert limit_for(0, pty=True) == PTY_LIMIT_S  # (off: a terminal's is not)
    assert limit_for(300, pty=False) == 300 and limit_for(0, pty=False) == 0


def test_holders_watch_a_job_with_its_own_limit_even_when_off() -> None:
    holders = Holders(0)
    holders.heard("plain", 0.0)
    holders.heard("pty", 0.0, PTY_LIMIT_S)
    assert not holders.knows("plain") and holders.knows("pty")
    assert holders.limit_of("pty") == PTY_LIMIT_S and holders.limit_of("plain") == 0
    assert holders.overdue(PTY_LIMIT_S - 1) == []
    (late,) = holders.overdue(PTY_LIMIT_S + 10)
    assert late.job_id == "pty"
    holders.forget("pty")
    assert not holders.due(1000.0)


def test_a_short_own_limit_is_checked_at_its_own_pace() -> None:
    holders = Holders(300)
    holders.heard("salloc", 0.0)
    holders.heard("pty", 0.0, 2)
    assert holders.overdue(1.0) == []  # (checks every 0.5 s from here, not every 5 s)
    assert [s.job_id for s in holders.overdue(3.0)] == ["pty"]
