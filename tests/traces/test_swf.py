"""SWF loading and the RLScheduler job clean-up."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from fusesched.traces.swf import (
    FIELD_NAMES,
    SwfHeader,
    TraceFormatError,
    load_swf,
    rlscheduler_jobs,
)
from sample_traces import SMALL_SWF as SMALL

RECORD = "1 0 0 100 1 -1 -1 1 -1 -1 1 1 1 1 1 1 -1 -1"


def write(tmp_path: Path, text: str, name: str = "t.swf") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_header_sizes_and_other_keys() -> None:
    header = load_swf(SMALL).header
    assert header.max_nodes == 4  # leading integer of "4 (plus 2 service nodes)"
    assert header.max_procs == 8  # ";MaxProcs:" without the space is accepted
    assert header.other["Note"] == ("first note", "second note")
    assert header.other["Version"] == ("2.2",)
    assert "MaxNodes" not in header.other


def test_max_procs_defaults_to_max_nodes(tmp_path: Path) -> None:
    header = load_swf(write(tmp_path, f"; MaxNodes: 256\n{RECORD}\n")).header
    assert header == SwfHeader(256, 256, header.other)


def test_header_without_sizes(tmp_path: Path) -> None:
    header = load_swf(write(tmp_path, f"; Version: 2\n{RECORD}\n")).header
    assert (header.max_nodes, header.max_procs) == (None, None)


def test_columns_types_and_missing_trailing_fields() -> None:
    trace = load_swf(SMALL)
    assert len(trace) == 6
    assert trace.path == SMALL
    assert trace.job_id.tolist() == [3, 1, 2, 4, 5, 6]
    assert trace.avg_cpu.dtype == np.float64
    assert trace.avg_cpu.tolist() == [1.5, 0.25, -1.0, -1.0, -1.0, -1.0]
    assert trace.req_time.dtype == np.int64
    # job 6 has only 9 fields: the other 9 are filled with -1
    assert [int(getattr(trace, name)[5]) for name in FIELD_NAMES[9:]] == [-1] * 9
    assert trace.req_time[5] == 10
    assert not trace.submit.flags.writeable


def test_gzip_is_detected_by_magic_bytes(tmp_path: Path) -> None:
    packed = tmp_path / "no-gz-suffix.swf"
    packed.write_bytes(gzip.compress(SMALL.read_bytes()))
    plain, unpacked = load_swf(SMALL), load_swf(packed)
    for name in FIELD_NAMES:
        np.testing.assert_array_equal(getattr(plain, name), getattr(unpacked, name))
    assert unpacked.header == plain.header


def test_fractional_values_in_integral_columns_are_rounded(tmp_path: Path) -> None:
    trace = load_swf(write(tmp_path, "1 10.6 0 99.5 1 -1 12.75 1 -1\n"))
    assert (trace.submit[0], trace.run[0]) == (11, 100)  # nearest, ties to even
    assert trace.used_mem[0] == 12.75


def test_crlf_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "crlf.swf"
    path.write_bytes(f"; MaxNodes: 2\r\n{RECORD}\r\n{RECORD}\r\n".encode())
    assert len(load_swf(path)) == 2


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (f"; MaxNodes: 4\n{RECORD}\n1 0 x 100 1\n", 3, "field 3 (wait) is not a finite number"),
        (f"{RECORD}\n\n1 0 0 100\n", 3, "too few fields (4"),
        (f"{RECORD} 7\n", 1, "too many fields (19"),
        (f"{RECORD}\n1 0 nan 100 1\n", 2, "field 3 (wait)"),
        (f"{RECORD}\n1 0 inf 100 1\n", 2, "field 3 (wait)"),
        (f"{RECORD}\n1 0 1e300 100 1\n", 2, "field 3 (wait)"),
        ("; MaxNodes: many\n" + RECORD + "\n", 1, "MaxNodes is not an integer"),
    ],
)
def test_malformed_input_names_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TraceFormatError) as error:
        load_swf(path)
    assert f"{path}:{line}: " in str(error.value)
    assert message in str(error.value)


@pytest.mark.parametrize("text", ["", "\n\n", "; Version: 2\n; MaxNodes: 4\n"])
def test_no_records(tmp_path: Path, text: str) -> None:
    with pytest.raises(TraceFormatError, match="no job records"):
        load_swf(write(tmp_path, text))


def test_corrupt_gzip(tmp_path: Path) -> None:
    path = tmp_path / "bad.swf.gz"
    path.write_bytes(gzip.compress(SMALL.read_bytes())[:40])
    with pytest.raises(TraceFormatError, match="corrupt gzip"):
        load_swf(path)


def test_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_swf(tmp_path / "absent.swf")


def test_rlscheduler_cleanup_order() -> None:
    jobs = rlscheduler_jobs(load_swf(SMALL))
    # job 4 (run time 0) is dropped; stable order by job number
    assert jobs.job_id.tolist() == [1, 2, 3, 5, 6]
    assert jobs.submit.tolist() == [0, 10, 40, 30, 50]
    # run time -1 becomes 10 s
    assert jobs.run.tolist() == [100, 10, 30, 10, 20]
    # n = max(allocated, requested): job 2 has allocated -1, requested 4
    assert jobs.procs.tolist() == [1, 4, 2, 1, 3]
    # r = requested time, else the *raw* run time: job 1 → 100, job 5 (both -1) keeps -1
    assert jobs.estimate.tolist() == [100, 200, 60, -1, 10]
    assert (jobs.max_nodes, jobs.max_procs, jobs.ppn) == (4, 8, 2.0)
    assert len(jobs) == 5


def test_rlscheduler_ppn_is_true_division(tmp_path: Path) -> None:
    text = f"; MaxNodes: 5544\n; MaxProcs: 93312\n{RECORD}\n"
    assert rlscheduler_jobs(load_swf(write(tmp_path, text))).ppn == 93312 / 5544


def test_rlscheduler_needs_max_nodes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="MaxNodes"):
        rlscheduler_jobs(load_swf(write(tmp_path, f"{RECORD}\n")))


def test_duplicate_job_numbers_keep_file_order(tmp_path: Path) -> None:
    text = "; MaxNodes: 4\n2 5 0 10 1\n1 9 0 10 1\n2 1 0 10 1\n"
    jobs = rlscheduler_jobs(load_swf(write(tmp_path, text)))
    assert jobs.job_id.tolist() == [1, 2, 2]
    assert jobs.submit.tolist() == [9, 5, 1]
