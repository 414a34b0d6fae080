"""The ITP (ElasticFlow) trace loader: both file forms, sorting, offsets, errors with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.traces.itp import ItpFormatError, itp_cluster_files, load_itp_jobs

SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces" / "microsoft-itp-elasticflow"

RAW = """job_id,submission_time,duration,num_gpu
a,2266647,604,16
b,2266000,767,1
c,2266647,10,2"""  # no trailing newline, as in the real files

ELASTIC = """job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration
a,100,5000,bert,9000,64,8,3600
b,50,100,vgg16,700,32,1,60
"""


def write(tmp_path: Path, text: str, name: str = "cluster01.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_raw_jobs_sorted_with_offsets_from_the_first_submission(tmp_path: Path) -> None:
    jobs = load_itp_jobs(write(tmp_path, RAW))
    assert [(j.job_id, j.submit_s, j.duration_s, j.gpus, j.line) for j in jobs] == [
        ("b", 0.0, 767.0, 1, 3),
        ("a", 647.0, 604.0, 16, 2),
        ("c", 647.0, 10.0, 2, 4),  # a tie keeps file order
    ]


def test_elasticflow_form_uses_only_the_real_columns(tmp_path: Path) -> None:
    jobs = load_itp_jobs(write(tmp_path, ELASTIC))
    assert [(j.job_id, j.submit_s, j.duration_s, j.gpus) for j in jobs] == [
        ("b", 0.0, 60.0, 1),
        ("a", 50.0, 3600.0, 8),
    ]


HEADER = "job_id,submission_time,duration,num_gpu\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("a,1,soon,1\n", ":2: duration is not a number: 'soon'"),
        ("a,-1,5,1\n", ":2: submission_time must be a non-negative number: '-1'"),
        ("a,1,inf,1\n", ":2: duration must be a non-negative number"),
        ("a,1,5,0\n", ":2: num_gpu must be a whole number ≥ 1"),
        ("a,1,5,1.5\n", ":2: num_gpu must be a whole number ≥ 1"),
        ("a,1,5,1\nb,2,5\n", ":3: expected 4 fields, found 3"),
        ("a,1,5,1\n,2,5,1\n", ":3: job_id is empty"),
        ("a,1,5,1\nb,2,5,1\na,3,5,1\n", ":4: job_id 'a' already on line 2"),
        ("\n\n", ": no jobs"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path, HEADER + body)
    with pytest.raises(ItpFormatError) as info:
        load_itp_jobs(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_missing_column_empty_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ItpFormatError, match=r"cluster01\.csv:1: missing column\(s\) num_gpu"):
        load_itp_jobs(write(tmp_path, "job_id,submission_time,duration\na,1,2\n"))
    with pytest.raises(ItpFormatError, match="empty file"):
        load_itp_jobs(write(tmp_path, ""))
    with pytest.raises(ItpFormatError, match="cannot read"):
        load_itp_jobs(tmp_path / "absent.csv")


def test_cluster_files(tmp_path: Path) -> None:
    write(tmp_path, RAW, "cluster02.csv")
    write(tmp_path, RAW, "cluster01.csv")
    write(tmp_path, RAW, "195job.csv")
    assert list(itp_cluster_files(tmp_path)) == ["cluster01", "cluster02"]
    with pytest.raises(ItpFormatError, match="not a folder"):
        itp_cluster_files(tmp_path / "nope")
    with pytest.raises(ItpFormatError, match=r"no clusterNN\.csv"):
        itp_cluster_files(_empty(tmp_path))


def _empty(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


@pytest.mark.skipif(not SHARED.exists(), reason="../shared (real ITP traces) is absent")
def test_real_files_match_their_source_notes() -> None:
    counts = {"cluster01": 1595, "cluster05": 3629, "cluster10": 260}
    for name, count in counts.items():
        raw = load_itp_jobs(SHARED / "raw-traces" / f"{name}.csv")
        flow = load_itp_jobs(SHARED / "elasticflow-traces" / f"{name}.csv")
        assert len(raw) == count
        assert [(j.job_id, j.submit_s, j.duration_s, j.gpus) for j in raw] == [
            (j.job_id, j.submit_s, j.duration_s, j.gpus) for j in flow
        ]
    assert "cluster06" not in itp_cluster_files(SHARED / "raw-traces")
