"""Durations, Slurm times and memory sizes, job arrays and dependencies."""

from __future__ import annotations

import pytest

from fusesched.model.job import DependencyKind
from fusesched.submit.syntax import (
    parse_array,
    parse_dependencies,
    parse_duration,
    parse_slurm_memory,
    parse_slurm_time,
)

SLURM_TIMES: list[tuple[str, float | None]] = [
    ("30", 1800),  # MM
    ("90", 5400),
    ("5:30", 330),  # MM:SS
    ("1:00:00", 3600),  # HH:MM:SS
    ("48:00:00", 172800),
    ("2-0", 172800),  # D-HH
    ("1-12", 129600),
    ("1-2:30", 95400),  # D-HH:MM
    ("1-02:30:15", 95415),  # D-HH:MM:SS
    ("0", None),
    ("UNLIMITED", None),
    ("infinite", None),
    ("-1", None),
]


@pytest.mark.parametrize(("text", "seconds"), SLURM_TIMES)
def test_slurm_time_formats(text: str, seconds: float | None) -> None:
    assert parse_slurm_time(text) == seconds


@pytest.mark.parametrize("text", ["", "1:2:3:4", "1-", "a", "1h", "-5", "1-2-3", "1.5"])
def test_bad_slurm_times(text: str) -> None:
    with pytest.raises(ValueError, match="formats: MM, MM:SS, HH:MM:SS, D-HH"):
        parse_slurm_time(text)


DURATIONS: list[tuple[str, float | None]] = [
    ("90s", 90),
    ("15m", 900),
    ("2h", 7200),
    ("1h30m", 5400),
    ("1d12h", 129600),
    ("1.5h", 5400),
    ("1h 30m", 5400),
    ("01:30:00", 5400),
    ("2-00:00:00", 172800),
    ("unlimited", None),
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_durations(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("90", "has no unit: write e.g. '90s', '90m' or '90h'"),
        ("2 hours", "cannot read duration"),
        ("h", "cannot read duration"),
        ("0s", "must be positive"),
        ("00:00", "must be positive"),
        ("1:x", "cannot read time"),
    ],
)
def test_bad_durations(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("4000", 4000 << 20),
        ("500M", 500 << 20),
        ("64G", 64 << 30),
        ("1t", 1 << 40),
        ("8K", 8192),
        # Slurm reads a B after the unit (submitit writes --mem=1GB)
        ("4GB", 4 << 30),
        ("512mb", 512 << 20),
        ("1Gb", 1 << 30),
    ],
)
def test_slurm_memory(text: str, size: int) -> None:
    assert parse_slurm_memory(text) == size


@pytest.mark.parametrize("text", ["4GiB", "1.5G", "-1", "lots", "", "4B", "GB"])
def test_bad_slurm_memory(text: str) -> None:
    with pytest.raises(ValueError, match="cannot read memory size"):
        parse_slurm_memory(text)


ARRAYS: list[tuple[str, tuple[int, int, int, int | None]]] = [
    ("1-10", (1, 10, 1, None)),
    ("0-9:2", (0, 8, 2, None)),  # stop trimmed to the last index
    ("1-10%4", (1, 10, 1, 4)),
    ("7", (7, 7, 1, None)),
    ("1,3,5", (1, 5, 2, None)),
    ("0-4:2,6,8%2", (0, 8, 2, 2)),
    ("5,1,3", (1, 5, 2, None)),
    ("3,3", (3, 3, 1, None)),
]


@pytest.mark.parametrize(("text", "expected"), ARRAYS)
def test_arrays(text: str, expected: tuple[int, int, int, int | None]) -> None:
    a = parse_array(text)
    assert (a.start, a.stop, a.step, a.max_parallel) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,2,7", "indices must be evenly spaced"),
        ("5-1", "ends before it starts"),
        ("1-10:0", "the step in '1-10:0' must be at least 1"),
        ("1-10%0", "the %N limit must be a positive whole number"),
        ("1-10%x", "the %N limit"),
        ("a-b", "cannot read 'a-b'"),
        ("", "cannot read ''"),
        ("0-2000000,2000001", "more than 1000000 indices"),
        ("0-999999999999", "more than 1000000 indices"),  # one range too: not a billion jobs
    ],
)
def test_bad_arrays(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_array(text)


def test_dependencies() -> None:
    deps = parse_dependencies("afterok:12:13,afterany:14_2,aftercorr:15,afternotok:16_*")
    assert [(d.kind, d.job_id) for d in deps] == [
        (DependencyKind.AFTER_OK, "12"),
        (DependencyKind.AFTER_OK, "13"),
        (DependencyKind.AFTER_ANY, "14_2"),
        (DependencyKind.AFTER_CORR, "15"),
        (DependencyKind.AFTER_NOT_OK, "16"),  # (Slurm's name of the whole array 16)
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("afterok:1?afterany:2", r"'\?' \(any of\) is not supported"),
        ("afterburstbuffer:1", "'afterburstbuffer:1' is not supported"),
        ("afterok:1_*x", "cannot read job id '1_\\*x'"),
        ("singleton:1", "singleton takes no job ids"),
        ("afterok", "give job ids, as in afterok:123:124"),
        ("afterok:1::2", "give job ids"),
        ("afterany:1+30", r"'\+time' delays are not supported"),
    ],
)
def test_bad_dependencies(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_dependencies(text)
