"""squeue's own order without ``-S`` (Slurm 22.05's ``P,t,-p``: partition, state, priority
highest first; ties as Slurm's: held jobs last), ``%p``/``%Q`` as
Slurm prints them, and ``SLURM_TIME_FORMAT``'s forms of the time stamps
(cli/squeue_sort.py, squeue_fields.py, squeue_time.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from fusesched.cli import squeue_format as sq
from fusesched.cli.squeue_plan import Given, plan, settings
from fusesched.cli.squeue_sort import JOB_SORT, SortKey, default_order, sort_rows
from fusesched.cli.squeue_time import parse_time_format, restamp, stamp

Job = dict[str, Any]


def view(job_id: str, queue: str, state: str, priority: int = 0, phase: str = "") -> Job:
    return {
        "id": job_id,
        "queue": queue,
        "state": state,
        "phase": phase or state.lower(),
        "priority": priority,
    }


def test_squeues_default_order_is_partition_state_priority_then_oldest() -> None:
    newest_first = [
        view("9", "gpu", "Running"),
        view("8", "cpu", "Pending", 5),
        view("7", "cpu", "Running", 1),
        view("6", "cpu", "Pending", 9),
        view("5", "cpu", "Pending", 50, phase="held"),  # (held: priority 0, as Slurm's)
        view("4", "cpu", "Pending", 5),
        view("3", "cpu", "Running", 1),
    ]
    keys = default_order(JOB_SORT, sq.FIELDS)
    assert keys == [SortKey("P"), SortKey("t"), SortKey("p", True), SortKey("_tie")]
    ordered = [j["id"] for j in sort_rows(newest_first, keys, sq.FIELDS)]
    assert ordered == ["6", "4", "8", "5", "3", "7", "9"]


def test_held_jobs_come_after_the_others_of_equal_priority_as_slurms() -> None:
    """fusesched's own priorities mostly tie (0). Checked against Slurm 22.05's squeue: its
    held jobs (priority 0) after those that may start (oldest first, their priorities
    falling with each job submitted), held ones newest first, an array's members (-r) in
    index order: ``50 51 52 49 48 44_1 44_2 43``."""
    newest_first = [
        view("52", "cpu", "Pending", 0),
        view("51", "cpu", "Pending", 0),
        view("50", "cpu", "Pending", 0),
        view("49", "cpu", "Pending", 0, phase="held"),
        view("48", "cpu", "Pending", 0, phase="held"),
        {**view("44_2", "cpu", "Pending", 0, phase="held"), "array_parent": "44"},
        {**view("44_1", "cpu", "Pending", 0, phase="held"), "array_parent": "44"},
        view("43", "cpu", "Pending", 0, phase="held"),
    ]
    ordered = sort_rows(newest_first, default_order(JOB_SORT, sq.FIELDS), sq.FIELDS)
    assert [j["id"] for j in ordered] == ["50", "51", "52", "49", "48", "44_1", "44_2", "43"]
    assert settings(plan(True, Given()))["sort"] == "P,t,-p"


def test_the_plan_orders_squeues_lines_by_default_and_jobs_newest_first() -> None:
    assert plan(True, Given()).order == default_order(JOB_SORT, sq.FIELDS)
    assert plan(True, Given(start=True)).order == [SortKey("S"), SortKey("i")]
    assert plan(True, Given(sort="-i")).order == [SortKey("i", True)]  # (-S as given)
    assert plan(False, Given()).order is None  # (fusesched jobs: newest first)
    assert plan(False, Given(fmt="%i")).order is None
    assert plan(True, Given(as_json=True)).order is None
    assert plan(True, Given(steps="")).order is None  # (steps: P,i, squeue_steps.py)


def test_priority_fields_as_slurm_prints_them() -> None:
    """``%p`` divided by 2**32 - 1, 14 decimals (a real Slurm: ``0.99998474074527`` for
    4294901757); ``%Q`` the integer; a held job's both 0."""
    pieces = sq.parse_format("%p|%Q")

    def shown(job: Job) -> str:
        return sq.render(pieces, [job], header=False)[0]

    assert shown(view("1", "a", "Pending", 4294901757)) == "0.99998474074527|4294901757"
    assert shown(view("1", "a", "Pending", 100)) == "0.00000002328306|100"
    assert shown(view("1", "a", "Pending", 0)) == "0.00000000000000|0"
    assert shown(view("1", "a", "Pending", 7, phase="held")) == "0.00000000000000|0"
    assert shown({"id": "1"}) == "0.00000000000000|0"
    assert sq.parse_format("%p")[0].field.header == "PRIORITY"  # type: ignore[union-attr]


NOON = time.mktime((2026, 6, 17, 12, 0, 0, 0, 0, -1))  # (a Wednesday)
DAY = 86400.0


@pytest.mark.parametrize(
    ("when", "shown"),
    [
        (NOON - 3600, "11:00:00"),
        (NOON - DAY, "Ystday 12:00"),
        (NOON + DAY, "Tomorr 12:00"),
        (NOON + 3 * DAY, "Sat 12:00"),
        (NOON + 6 * DAY, "Tue 12:00"),
        (NOON + 7 * DAY, "24 Jun 12:00"),
        (NOON - 2 * DAY, "15 Jun 12:00"),
        (NOON + 400 * DAY, "22 Jul 2027"),
    ],
)
def test_relative_time_as_slurms(when: float, shown: str) -> None:
    assert stamp(when, parse_time_format("relative"), now=NOON) == shown


def test_time_formats_standard_strftime_and_bad_ones() -> None:
    assert stamp(NOON, parse_time_format("standard")) == "2026-06-17T12:00:00"
    assert stamp(NOON, parse_time_format(None)) == "2026-06-17T12:00:00"
    assert stamp(NOON, parse_time_format("%a %T")) == "Wed 12:00:00"
    assert stamp(None, "relative") == "N/A"
    for bad in ("bogus", "%Y-%m-%d %H:%M:%S and some more text here"):  # (no %; 32 or more long)
        with pytest.raises(ValueError, match="no time format"):
            parse_time_format(bad)


def test_the_time_fields_take_the_format_the_others_stay() -> None:
    job = {"id": "3", "submit_time": NOON, "start_time": NOON, "time_limit_s": 60.0}
    pieces = restamp(sq.parse_format("%i %V %S %e %l"), "%H:%M")
    assert sq.render(pieces, [job], header=False) == ["3 12:00 12:00 12:01 1:00"]
    long = restamp(sq.parse_long_format("SubmitTime:8,EndTime:8"), "%H:%M")
    assert sq.render(long, [job]) == ["SUBMIT_TEND_TIME", "12:00   12:01   "]  # (as 22.05's)


def test_a_time_format_is_measured_and_a_time_cut_in_bytes_as_slurms() -> None:
    """Checked against Slurm 22.05's squeue: ``SLURM_TIME_FORMAT`` of 32 bytes or more is
    refused (15 ``é`` and ``%Y``: 17 characters, 32 bytes), one of 31 taken; a time written
    longer than 31 bytes is cut there (``Tuesday December 08 2026 02:17:``), never inside a
    character."""
    with pytest.raises(ValueError, match="no time format"):
        parse_time_format("é" * 15 + "%Y")
    assert stamp(NOON, parse_time_format("é" * 14 + "%y")) == "é" * 14 + "26"
    assert stamp(NOON, "%A %B %d %Y %H:%M:%S") == "Wednesday June 17 2026 12:00:00"
    assert stamp(NOON, "%A %B %d %Y %H:%M:%S (%Z)") == "Wednesday June 17 2026 12:00:00"
    assert stamp(NOON, "%Y-%m-%d   %H:%M:%S   %A") == "2026-06-17   12:00:00   Wednesd"
    assert stamp(NOON, "%Y" + "é" * 14) == "2026" + "é" * 13  # (31 bytes: no half of one)
    assert stamp(NOON, "%H:%M ") == "12:00 "  # (a format's own blank stays)
