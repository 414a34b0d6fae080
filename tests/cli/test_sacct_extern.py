"""``fusesched sacct``'s rows of a ``salloc`` job: its own task only holds the allocation
(the command runs on the submit host), so it is the job's ``ID.extern`` step, as in Slurm
(which runs no batch step for ``salloc``), never ``ID.batch``; each ``srun`` is ``ID.N``.
The job's view says so (``allocation``: the controller knows salloc's holder by its script,
submit/salloc_holder.py)."""

from __future__ import annotations

from typing import Any

import pytest
from tests.cli.test_sacct_steps import NOW, job, table, task

from fusesched.api.job_schemas import JobView
from fusesched.cli import sacct_steps as st
from fusesched.cli.salloc_plan import allocation_request, split_salloc_args
from fusesched.controller.job_view import job_view
from fusesched.model.phases import node_failure
from fusesched.store.records import JobRow, JobState
from fusesched.submit.sbatch import parse_sbatch

#: salloc -N 2 (exit 0): its holder on n1, step 0 on both nodes, step 1 on n2.
TASKS = [
    task("9.main.0", end=NOW - 20, cpu_seconds=0.1),
    task("9.remote.1", start=NOW - 80, end=NOW - 70, step=0, step_name="hostname"),
    task("9.remote.2", "n2", start=NOW - 80, end=NOW - 70, step=0, step_name="hostname"),
    task("9.remote.3", "n2", start=NOW - 60, end=NOW - 50, code=2, step=1, step_name="sh"),
]
RUNNING, NODE_FAIL = ("RUNNING", "0:0"), ("NODE_FAIL", "0:0")
LOST = node_failure("node n0 stopped heartbeating")  # (the controller's reason: NODE_FAIL)
FIELDS = "JobID,JobName,State,ExitCode,NodeList,NTasks,AllocCPUS"


def salloc_job(tasks: list[dict[str, Any]] = TASKS, **fields: Any) -> dict[str, Any]:
    base = {"id": "9", "name": "bash", "state": "Completed", "phase": "completed", "exit_code": 0}
    return job(tasks, allocation=True, cpus_per_task=1.0, **{**base, **fields})


def test_a_salloc_job_shows_an_extern_step_and_no_batch_step() -> None:
    """Slurm's extern step holds the whole allocation: every node (one task on each) and all
    the job's CPUs, though the holder runs on the first node only."""
    assert table(salloc_job(), FIELDS) == {
        "9.extern": ["9.extern", "extern", "COMPLETED", "0:0", "n[1-2]", "2", "4"],
        "9.0": ["9.0", "hostname", "COMPLETED", "0:0", "n[1-2]", "2", "2"],
        "9.1": ["9.1", "sh", "FAILED", "2:0", "n2", "1", "1"],
    }


@pytest.mark.parametrize(
    ("state", "code", "job_fields", "shown"),
    [
        # the command failed: salloc ends the holder with exit 1, the job's row says FAILED
        (None, 1, {"state": "Failed", "phase": "failed", "exit_code": 1}, ("COMPLETED", "0:0")),
        # cancelled or timed out: the holder was stopped by SIGTERM
        (None, -15, {"state": "Cancelled", "phase": "cancelled"}, ("COMPLETED", "0:0")),
        (None, -15, {"state": "Failed", "phase": "timeout"}, ("COMPLETED", "0:0")),
        # still holding the allocation; its node lost
        ("running", None, {"state": "Running", "phase": "running", "end_time": None}, RUNNING),
        ("lost", None, {"state": "Failed", "phase": "failed", "reason": LOST}, NODE_FAIL),
    ],
)
def test_the_extern_step_ends_as_slurm_s_does(
    state: str | None, code: int | None, job_fields: dict[str, Any], shown: tuple[str, str]
) -> None:
    holder = task("9.main.0", end=None if state else NOW - 20, code=code)
    row = table(salloc_job([holder], **job_fields), "JobID,State,ExitCode")["9.extern"]
    assert tuple(row[1:]) == shown


def test_j_extern_selects_it() -> None:
    _, picks = st.parse_job_steps(["9.extern"])
    names = st.picked(picks, {"id": "9"})
    assert list(table(salloc_job(), "JobID", names)) == ["9.extern"]
    assert list(table(job(TASKS[:1], id="9"), "JobID", names)) == []  # (an sbatch job: none)


def _view(request: dict[str, Any]) -> JobView:
    row = JobRow("9", 9, "ann", JobState.COMPLETED, "completed", NOW, request)
    return job_view(row, [])


def test_the_controller_knows_salloc_s_job_by_its_holder() -> None:
    allocation, _ = allocation_request(split_salloc_args(["-N", "2", "bash"]), ["bash"])
    held = _view(allocation.model_dump(mode="json", exclude_none=True))
    assert (held.batch, held.allocation) == (True, True)
    script = parse_sbatch("#!/bin/sh\nsleep 60\n").request.model_dump(mode="json")
    assert (_view(script).batch, _view(script).allocation) == (True, False)
    assert _view({}).allocation is False  # (an odd or older request)
