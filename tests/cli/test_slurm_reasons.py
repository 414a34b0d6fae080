"""A waiting job's reason as Slurm's squeue prints it (the code alone), where fusesched's own
commands say more: scripts written for Slurm compare the code (``squeue -h -o %r -j $ID``)."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from fusesched.cli import slurm_reasons
from fusesched.cli.main import app
from fusesched.cli.slurm_reasons import job_reason, slurm_reason
from fusesched.controller import holds
from fusesched.controller.reservations import begin_reason
from fusesched.core import pending_reasons
from fusesched.core.licenses import LicensePool
from fusesched.sdk import Client

from .test_squeue_default import submit, url  # noqa: F401  (the controller fixture)


def test_the_words_it_reads_are_the_controllers_and_the_cores() -> None:
    """The prefixes are copies (listing jobs imports neither the controller nor the core):
    they must stay the same words."""
    assert slurm_reasons.ADMIN_PREFIX == holds.ADMIN_PREFIX
    assert slurm_reasons.USER_PREFIX == holds.USER_PREFIX
    assert slurm_reasons.AT_SUBMIT == holds.AT_SUBMIT
    assert slurm_reasons.REQ_NODE_NOT_AVAIL == pending_reasons.REQ_NODE_NOT_AVAIL


@pytest.mark.parametrize(
    ("stored", "code"),
    [
        ("", "None"),
        (None, "None"),
        ("Resources", "Resources"),
        ("Priority: waits while job 12 takes the room it preempted for", "Priority"),
        ("Dependency: jobs 3, 4, 5 and 2 more", "Dependency"),
        ("JobArrayTaskLimit: array 3 runs at most 2 at a time", "JobArrayTaskLimit"),
        ("QuotaExceeded: queue physics gpu 8/8, needs 2", "QuotaExceeded"),
        ("QOSMaxJobsPerUserLimit: ann runs 4 of 4", "QOSMaxJobsPerUserLimit"),
        ("Resources; requeued (preempted for job 12)", "Resources"),
        ("requeued (node n3 failed); eligible at 12:00:05", "BeginTime"),
        ("ReqNodeNotAvail: n3 drained, n4 down", "ReqNodeNotAvail, UnavailableNodes:n3,n4"),
        ("held: waiting for data", "JobHeldUser"),
        ("submitted held", "JobHeldUser"),
        ("held by user", "JobHeldUser"),
        ("held by administrator: maintenance", "JobHeldAdmin"),
        ("released", "None"),
        ("reservation maint starts at 2026-12-08 09:00", "Reservation"),
        ("pending in pool hpc: Priority", "Priority"),
        ("something new the controller says", "something new the controller says"),
    ],
)
def test_each_reason_reads_as_slurms_code(stored: str | None, code: str) -> None:
    assert slurm_reason(stored) == code


@pytest.mark.parametrize(
    ("view", "code"),
    [
        ({"state": "Running", "reason": ""}, "None"),
        ({"state": "Completed", "phase": "completed", "reason": "exit 0"}, "None"),
        ({"state": "Failed", "phase": "failed", "reason": "exit 3"}, "NonZeroExitCode"),
        ({"state": "Cancelled", "phase": "cancelled", "reason": "cancelled by user"}, "None"),
        ({"state": "Failed", "phase": "timeout", "reason": "walltime exceeded"}, "TimeLimit"),
        ({"state": "Pending", "phase": "pending", "reason": "Dependency: job 3"}, "Dependency"),
    ],
)
def test_a_running_or_ended_jobs_code_is_its_states(view: dict[str, str], code: str) -> None:
    """As a real Slurm 22.05's squeue -t all: FAILED NonZeroExitCode, COMPLETED and
    CANCELLED None (fusesched stores ``exit 3``, ``cancelled by user``)."""
    assert job_reason(view) == code


def test_the_shells_own_reasons_read_as_codes() -> None:
    """What the controller writes itself, made by its own functions."""
    assert slurm_reason(begin_reason(time.time() + 3600)) == "BeginTime"
    pool = LicensePool.of((("matlab", 1),))
    assert pool is not None
    pool.take("12", (("matlab", 1),))
    assert slurm_reason(pool.shortage((("matlab", 1),))) == "Licenses"


def test_squeue_by_its_name_prints_codes_and_jobs_the_whole_reason(url: str) -> None:  # noqa: F811
    client = Client(url)
    done = submit(client, "quick", 0.05)
    assert client.wait(done, timeout=20)["state"] == "Completed"
    first = submit(client, "long", 60)
    second = submit(client, "after", 1)
    client.hold(second, "waiting for data")
    runner = CliRunner()
    said = runner.invoke(app, ["squeue", "-h", "-t", "all", "-o", "%i %r", "--controller", url])
    assert said.exit_code == 0, said.output
    assert dict(line.split(" ", 1) for line in said.output.splitlines()) == {
        done: "None",
        first: "None",
        second: "JobHeldUser",
    }
    brackets = runner.invoke(app, ["squeue", "-h", "-j", second, "-o", "%R", "--controller", url])
    assert brackets.output.strip() == "(JobHeldUser)"
    own = runner.invoke(app, ["jobs", "-h", "-j", second, "-o", "%r", "--controller", url])
    assert own.output.strip() == "held: waiting for data"
