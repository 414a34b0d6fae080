"""``seff`` by Slurm's name, pure: the lines of Slurm 22.05's seff for a job's efficiency and
view, with their conditions (an array's member, several nodes, pending, running, ended by a
signal, nothing measured)."""

from __future__ import annotations

from typing import Any

import pytest

from fusesched.cli.seff_report import kbytes, report, unmeasured

GIB = 2**30


def eff(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "12",
        "user": "ann",
        "state": "Completed",
        "phase": "completed",
        "exit_code": 0,
        "nodes": ["n1", "n2"],
        "elapsed_s": 602.4,
        "tasks_count": 8,
        "cpus": 8.0,
        "cpu_seconds": 602.0,
        "cpu_efficiency_pct": 12.5,
        "memory_bytes": 8 * GIB,
        "max_rss_bytes": int(1.16 * GIB),
        "memory_efficiency_pct": 14.5,
        "notes": [],
    }
    return base | fields


def view(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "12",
        "user": "ann",
        "tenant": "physics",
        "state": "Completed",
        "phase": "completed",
        "exit_code": 0,
        "reason": None,
    }
    return base | fields


def test_a_job_on_two_nodes() -> None:
    assert report(eff(), view()) == [
        "Job ID: 12",
        "Cluster: fusesched",
        "User/Group: ann/physics",
        "State: COMPLETED (exit code 0)",
        "Nodes: 2",
        "Cores per node: 4",
        "CPU Utilized: 00:10:02",
        "CPU Efficiency: 12.50% of 01:20:19 core-walltime",
        "Job Wall-clock time: 00:10:02",
        "Memory Utilized: 1.16 GB (estimated maximum)",
        "Memory Efficiency: 14.50% of 8.00 GB (4.00 GB/node)",
    ]


def test_an_array_member_on_one_core_that_failed() -> None:
    one = eff(
        id="9_3", nodes=["n1"], cpus=1.0, tasks_count=1, memory_bytes=GIB, max_rss_bytes=5 << 20
    )
    lines = report(one, view(id="9_3", array_parent="9", phase="failed", exit_code=3))
    assert lines[:6] == [
        "Job ID: 9_3",
        "Array Job ID: 9_3",
        "Cluster: fusesched",
        "User/Group: ann/physics",
        "State: FAILED (exit code 3)",
        "Cores: 1",
    ]
    assert lines[-2:] == [
        "Memory Utilized: 5.00 MB",
        "Memory Efficiency: 14.50% of 1.00 GB (1.00 GB/node)",
    ]


def test_a_timeout_and_a_signal() -> None:
    assert report(eff(), view(phase="timeout", exit_code=-15))[3] == "State: TIMEOUT (exit code 0)"
    killed = report(eff(), view(phase="failed", exit_code=-9))[3]
    assert killed == "State: FAILED (exit code 0)"  # (a signal: no exit status)


def test_running_and_pending() -> None:
    lines = report(eff(), view(state="Running", phase="running", exit_code=None))
    assert lines[3] == "State: RUNNING"
    assert lines[-1] == "WARNING: Efficiency statistics may be misleading for RUNNING jobs."
    waiting = eff(nodes=[], elapsed_s=None, cpu_seconds=None, max_rss_bytes=None)
    lines = report(waiting, view(state="Pending", phase="queued", exit_code=None, min_nodes=2))
    assert lines[3:] == [
        "State: PENDING",
        "Nodes: 2",
        "Cores per node: 4",
        "Efficiency not available for jobs in the PENDING state.",
    ]
    assert unmeasured(waiting, view(state="Pending", phase="queued")) == []


def test_nothing_measured_shows_zeros_and_says_why() -> None:
    bare = eff(
        cpu_seconds=None,
        cpu_efficiency_pct=None,
        max_rss_bytes=None,
        memory_efficiency_pct=None,
        memory_bytes=None,
        notes=["too short to be sampled"],
    )
    lines = report(bare, view())
    assert lines[6] == "CPU Utilized: 00:00:00"
    assert lines[7] == "CPU Efficiency: 0.00% of 01:20:19 core-walltime"
    assert lines[-2:] == [
        "Memory Utilized: 0.00 MB (estimated maximum)",
        "Memory Efficiency: 0.00% of 0.00 MB (0.00 MB/node)",
    ]
    assert unmeasured(bare, view()) == ["too short to be sampled"]
    assert unmeasured(eff(notes=["x"]), view()) == []


@pytest.mark.parametrize(
    ("n_bytes", "said"),
    [(None, "0.00 MB"), (0, "0.00 MB"), (512, "0.50 KB"), (1536, "1.50 KB"), (3 * GIB, "3.00 GB")],
)
def test_sizes(n_bytes: int | None, said: str) -> None:
    assert kbytes(n_bytes) == said
