"""How the client tables show values: memory at a glance, held jobs marked."""

from __future__ import annotations

import pytest
from rich.console import Console

from fusesched.cli.live import _memory, jobs_table


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("24683784Ki", "23.5Gi"),  # what agents report for a 24 GB machine
        ("4Gi", "4Gi"),
        ("1536Mi", "1.5Gi"),
        ("512Mi", "512Mi"),
        ("2Ti", "2Ti"),
        ("1000", "1000"),  # under a MiB: as given
        ("lots", "lots"),  # not a quantity: as given, never an error
    ],
)
def test_memory_reads_at_a_glance(text: str, shown: str) -> None:
    assert _memory(text) == shown


def test_a_held_job_is_marked_in_the_jobs_table() -> None:
    jobs = [
        {"id": "7", "state": "Pending", "phase": "held"},
        {"id": "8", "state": "Pending", "phase": "queued"},
    ]
    console = Console(width=200, record=True)
    console.print(jobs_table(jobs))
    lines = console.export_text().splitlines()
    assert any(line.lstrip().startswith("7") and "Pending (held)" in line for line in lines)
    assert any(line.lstrip().startswith("8") and "(held)" not in line for line in lines)


@pytest.mark.parametrize(
    ("phase", "reason", "shown"),
    [
        ("timeout", "walltime exceeded", "Timeout"),
        ("failed", "memory limit exceeded (killed by the kernel's OOM killer)", "OutOfMemory"),
        ("failed", "NodeDown: node local-2 lost", "NodeFail"),
        ("preempted", "preempted by job 9", "Preempted"),
        ("failed", "exit code 3", "Failed"),
        ("cancelled", "cancelled by user", "Cancelled"),
    ],
)
def test_the_jobs_table_says_how_a_job_ended(phase: str, reason: str, shown: str) -> None:
    """A timed-out job is ``Failed`` with phase ``timeout``: the table says ``Timeout``, as
    ``sacct`` and ``squeue -o %T`` do, not ``Failed -15``."""
    state = "Cancelled" if phase == "cancelled" else "Failed"
    job = {"id": "11", "state": state, "phase": phase, "reason": reason, "exit_code": -15}
    console = Console(width=200, record=True)
    console.print(jobs_table([job]))
    row = next(line for line in console.export_text().splitlines() if line.lstrip()[:2] == "11")
    assert row.split()[1] == shown
