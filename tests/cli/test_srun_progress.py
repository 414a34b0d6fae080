"""What ``run`` says of its job's wait and start on stderr, and what it says when called by
Slurm's name: Slurm's srun says nothing of a job that did not wait (scripts capture its
stderr), and after a wait ``job N has been allocated resources``."""

from __future__ import annotations

from fusesched.cli.srun import QUEUED_AFTER_S, Progress


def _seen(slurm: bool, waits: bool) -> list[str]:
    said: list[str] = []
    now = [0.0]
    progress = Progress("7", said.append, lambda: now[0], slurm)
    if waits:
        now[0] = QUEUED_AFTER_S + 1
        progress.seen({"state": "Pending"})
    progress.seen({"state": "Running", "nodes": ["n1", "n2"]})
    progress.seen({"state": "Running", "nodes": ["n1", "n2"]})  # (said once)
    return said


def test_run_says_where_its_job_started() -> None:
    assert _seen(slurm=False, waits=False) == ["job 7 started on n1,n2"]
    assert _seen(slurm=False, waits=True) == [
        "job 7 queued and waiting for resources",
        "job 7 started on n1,n2",
    ]


def test_srun_says_nothing_unless_the_job_waited() -> None:
    assert _seen(slurm=True, waits=False) == []
    assert _seen(slurm=True, waits=True) == [
        "job 7 queued and waiting for resources",
        "job 7 has been allocated resources",
    ]
