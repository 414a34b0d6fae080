"""The Philly trace loader: sorting, offsets, task shapes, and errors with file and line."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from fusesched.traces.philly import (
    PhillyFormatError,
    load_philly_jobs,
    load_philly_vcs,
    share_of,
    task_shape,
)

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces" / "philly"

GOOD = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,8,23608.0,6214e9
2017-10-09 06:13:03,10.0,16,160.0,6214e9

"""


def write(tmp_path: Path, text: str, name: str = "philly.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_jobs_are_sorted_with_offsets_from_the_first_submission(tmp_path: Path) -> None:
    jobs = load_philly_jobs(write(tmp_path, GOOD))
    assert [(j.submit_s, j.gpus, j.vc, j.line) for j in jobs] == [
        (0.0, 8, "6214e9", 3),
        (0.0, 16, "6214e9", 4),  # a tie keeps file order
        (2932.0, 1, "11cb48", 2),
    ]
    assert jobs[0].duration_s == 2951.0


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("2017-10-09,66.0,1,66.0,a", ":2: timestamp '2017-10-09' is not YYYY-MM-DD HH:MM:SS"),
        ("2017-13-09 07:01:55,66.0,1,66.0,a", ":2: timestamp '2017-13-09 07:01:55' is not a valid"),
        ("2017-10-09 07:01:55,soon,1,66.0,a", ":2: duration is not a number: 'soon'"),
        ("2017-10-09 07:01:55,-5,1,66.0,a", ":2: duration must be a non-negative number"),
        ("2017-10-09 07:01:55,nan,1,66.0,a", ":2: duration must be a non-negative number"),
        ("2017-10-09 07:01:55,5,1.5,66.0,a", ":2: num_gpus must be a whole number"),
        ("2017-10-09 07:01:55,5,0,66.0,a", ":2: num_gpus must be a whole number"),
        ("2017-10-09 07:01:55,5,1,66.0,", ":2: cluster (the VC) is empty"),
    ],
)
def test_malformed_rows_are_reported_with_their_line(
    tmp_path: Path, row: str, message: str
) -> None:
    path = write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n" + row + "\n")
    with pytest.raises(PhillyFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_philly_jobs(path)


def test_missing_columns_empty_and_absent_files(tmp_path: Path) -> None:
    with pytest.raises(PhillyFormatError, match=r":1: missing column\(s\) cluster"):
        load_philly_jobs(write(tmp_path, "timestamp,duration,num_gpus,gpu_time\n"))
    with pytest.raises(PhillyFormatError, match="no jobs"):
        load_philly_jobs(write(tmp_path, "timestamp,duration,num_gpus,gpu_time,cluster\n"))
    with pytest.raises(PhillyFormatError, match="cannot read"):
        load_philly_jobs(tmp_path / "absent.csv")


def test_vc_sizes(tmp_path: Path) -> None:
    vcs = load_philly_vcs(write(tmp_path, "vc,node num\na,64\nb,32\n", "vc.csv"))
    assert vcs == {"a": 64, "b": 32}
    assert share_of(vcs) == {"a": 2 / 3, "b": 1 / 3}
    with pytest.raises(PhillyFormatError, match=":3: VC 'a' is listed twice"):
        load_philly_vcs(write(tmp_path, "vc,node num\na,64\na,32\n", "vc.csv"))
    with pytest.raises(PhillyFormatError, match=":2: node num must be a whole number"):
        load_philly_vcs(write(tmp_path, "vc,node num\na,0\n", "vc.csv"))


@pytest.mark.parametrize(
    ("gpus", "shape"),
    [(1, (1, 1)), (8, (1, 8)), (16, (2, 8)), (12, (3, 4)), (24, (3, 8)), (128, (16, 8))],
)
def test_task_shape(gpus: int, shape: tuple[int, int]) -> None:
    assert task_shape(gpus, 8) == shape


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces/philly is absent")
def test_the_real_trace() -> None:
    jobs = load_philly_jobs(SHARED / "philly.csv")
    assert len(jobs) == 82_247
    assert jobs[0].submit_s == 0.0
    assert all(a.submit_s <= b.submit_s for a, b in itertools.pairwise(jobs))
    assert sum(j.duration_s * j.gpus for j in jobs) / 3600 == pytest.approx(978_078, rel=1e-3)
    vcs = load_philly_vcs(SHARED / "philly_vc.csv")
    assert len(vcs) == 11 and sum(vcs.values()) == 352
