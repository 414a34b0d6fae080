"""The RLScheduler protocol against the published anchors (PROTOCOL.md sections 2, 8 and 10)."""

from __future__ import annotations

import csv
from functools import cache

import numpy as np
import pytest

from fusesched.sim.protocols.rlscheduler import (
    default_batch_job_slice,
    replay_whole_trace,
    run_rlscheduler,
    sequence_starts,
)

from ._shared import SHARED, needs_shared, rl_jobs

STARTS = [1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085]

# table name → (path under shared/, trace_file column of the CSV)
TRACES = {
    "Lublin-1": ("traces/lublin-swf/lublin_256.swf", "lublin_256.swf"),
    "SDSC-SP2": ("traces/pwa-swf/SDSC-SP2-1998-4.2-cln.swf.gz", "SDSC-SP2-1998-4.2-cln.swf"),
    "HPC2N": ("traces/pwa-swf/HPC2N-2002-2.2-cln.swf.gz", "HPC2N-2002-2.2-cln.swf"),
    "Lublin-2": ("anchors/rlscheduler/lublin_256_new2", "lublin_256_new2"),
}
POLICIES = {"FCFS": "fcfs", "WFP3": "wfp3", "UNI": "unicep", "SJF": "sjf", "F1": "f1"}

# PROTOCOL.md section 8, supplementary table: (WFP3 textbook, UNICEP textbook) mean bsld
TEXTBOOK = {
    ("Lublin-1", False): (337.34, 381.71),
    ("SDSC-SP2", False): (1205.96, 1699.00),
    ("HPC2N", False): (213.14, 113.86),
    ("Lublin-2", False): (807.25, 830.49),
    ("Lublin-1", True): (126.50, 103.10),
    ("SDSC-SP2", True): (675.49, 1517.21),
    ("HPC2N", True): (143.36, 82.45),
    ("Lublin-2", True): (135.12, 111.19),
}

Row = tuple[str, bool, str, str]  # trace_file, backfill, metric, policy


@cache
def measured() -> dict[Row, list[tuple[int, float]]]:
    """measured_here_per_sequence.csv: (start index, value) per sequence, in sequence order."""
    rows: dict[Row, list[tuple[int, int, float]]] = {}
    path = SHARED / "anchors/rlscheduler/measured_here_per_sequence.csv"
    with path.open(newline="") as file:
        for row in csv.DictReader(file):
            key = (row["trace_file"], row["backfill"] == "1", row["metric"], row["policy"])
            entry = (int(row["sequence_index"]), int(row["start_job_index"]), float(row["value"]))
            rows.setdefault(key, []).append(entry)
    return {key: [(start, value) for _, start, value in sorted(v)] for key, v in rows.items()}


def run(trace: str, policy: str, backfill: bool) -> tuple[list[float], list[float], list[int]]:
    path, _ = TRACES[trace]
    result = run_rlscheduler(
        rl_jobs(path), policy, backfill, batch_job_slice=default_batch_job_slice(path)
    )
    assert result.policy == policy and result.backfill is backfill
    assert [s.index for s in result.sequences] == list(range(10))
    assert all(s.jobs == 1024 for s in result.sequences)
    return (
        [s.avg_bounded_slowdown for s in result.sequences],
        [s.utilization for s in result.sequences],
        [s.start_job_index for s in result.sequences],
    )


def test_seeding_gives_the_published_start_indices() -> None:
    assert sequence_starts(10_000) == STARTS


def test_too_few_jobs_for_a_sequence() -> None:
    with pytest.raises(ValueError, match="too few"):
        sequence_starts(2049)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("SDSC-SP2-1998-4.2-cln.swf.gz", 10_000),
        ("/x/HPC2N-2002-2.2-cln.swf", 10_000),
        ("lublin_256.swf", 0),
        ("lublin_256_new2", 0),
        ("CEA-Curie-2011-2.1-cln.swf.gz", 0),
    ],
)
def test_default_batch_job_slice(name: str, expected: int) -> None:
    assert default_batch_job_slice(name) == expected


@needs_shared
@pytest.mark.parametrize(
    ("path", "count"),
    [
        ("traces/pwa-swf/SDSC-SP2-1998-4.2-cln.swf.gz", 59_705),
        ("traces/pwa-swf/HPC2N-2002-2.2-cln.swf.gz", 202_871),
        ("traces/lublin-swf/lublin_256.swf", 10_000),
        ("anchors/rlscheduler/lublin_256_new2", 10_000),
    ],
)
def test_loaded_job_counts(path: str, count: int) -> None:
    assert len(rl_jobs(path)) == count


@needs_shared
def test_sdsc_job_5057_keeps_estimate_minus_one() -> None:
    jobs = rl_jobs(TRACES["SDSC-SP2"][0])
    assert jobs.job_id[5046] == 5057
    assert (jobs.run[5046], jobs.estimate[5046], jobs.procs[5046]) == (10, -1, 1)


@needs_shared
@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("backfill", [False, True], ids=["plain", "backfill"])
@pytest.mark.parametrize("trace", TRACES)
def test_every_measured_sequence_is_reproduced(trace: str, backfill: bool, policy: str) -> None:
    bsld, utilization, starts = run(trace, POLICIES[policy], backfill)
    csv_name = TRACES[trace][1]
    expected_bsld = measured()[(csv_name, backfill, "avg_bounded_slowdown", policy)]
    expected_util = measured()[(csv_name, backfill, "utilization", policy)]
    assert starts == STARTS == [start for start, _ in expected_bsld]
    np.testing.assert_allclose(bsld, [v for _, v in expected_bsld], rtol=1e-6, atol=0)
    np.testing.assert_allclose(utilization, [v for _, v in expected_util], rtol=1e-5, atol=0)


@needs_shared
@pytest.mark.parametrize(("trace", "backfill"), list(TEXTBOOK))
def test_textbook_wfp3_and_unicep_means(trace: str, backfill: bool) -> None:
    means = tuple(
        round(float(np.mean(run(trace, policy, backfill)[0])), 2)
        for policy in ("wfp3-textbook", "unicep-textbook")
    )
    assert means == TEXTBOOK[(trace, backfill)]


@needs_shared
@pytest.mark.parametrize(
    ("path", "backfill", "bsld", "utilization"),
    [
        ("traces/pwa-swf/SDSC-SP2-1998-4.2-cln.swf.gz", True, 1220.669, 0.8291),
        ("traces/pwa-swf/SDSC-SP2-1998-4.2-cln.swf.gz", False, 32628.95, None),
        ("traces/pwa-swf/CEA-Curie-2011-2.1-cln.swf.gz", False, 504.84, None),
    ],
)
def test_whole_trace_fcfs_replays(
    path: str, backfill: bool, bsld: float, utilization: float | None
) -> None:
    result = replay_whole_trace(rl_jobs(path), "fcfs", backfill)
    assert result.jobs == len(rl_jobs(path))
    assert round(result.avg_bounded_slowdown, len(str(bsld).split(".")[1])) == bsld
    if utilization is not None:
        assert round(result.utilization, 4) == utilization
