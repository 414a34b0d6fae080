"""A command asked to requeue its own job outlives the job's stop (cli/own_job.py): it
ignores the SIGTERM the requeue brings, so its caller sees its own exit status (submitit's
``scontrol requeue $SLURM_JOB_ID`` saw the command killed and took it for a failure)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from fusesched.cli.own_job import outlive_own_stop, own_jobs

# (in a process of its own: the test's must keep its SIGTERM)
PROGRAM = """
import os, signal, sys, time
from fusesched.cli.own_job import outlive_own_stop
print(outlive_own_stop(sys.argv[1:]), flush=True)
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.2)
print("went on", flush=True)
"""


def _run(env: dict[str, str], *ids: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *ids], env=env, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    ("env", "ids"),
    [
        ({"SLURM_JOB_ID": "25"}, ["25"]),
        ({"SLURM_JOB_ID": "7_3", "SLURM_ARRAY_JOB_ID": "7"}, ["7"]),  # (its array's id)
        ({"FUSESCHED_JOB_ID": "12"}, ["3", "12"]),
    ],
)
def test_its_own_job_sigterm_is_outlived(env: dict[str, str], ids: list[str]) -> None:
    done = _run({**env, "PATH": "/usr/bin:/bin"}, *ids)
    assert (done.returncode, done.stdout) == (0, "True\nwent on\n"), done.stderr


@pytest.mark.parametrize(
    ("env", "ids"), [({}, ["25"]), ({"SLURM_JOB_ID": "25"}, ["26"]), ({"SLURM_JOB_ID": ""}, [""])]
)
def test_another_job_or_none_keeps_sigterm(env: dict[str, str], ids: list[str]) -> None:
    done = _run({**env, "PATH": "/usr/bin:/bin"}, *ids)
    assert done.returncode == -signal.SIGTERM and done.stdout == "False\n"


def test_own_jobs_reads_slurms_and_fuseschedss_variables() -> None:
    env = {"SLURM_JOB_ID": "7_3", "SLURM_ARRAY_JOB_ID": "7", "FUSESCHED_JOB_ID": "7_3"}
    assert own_jobs(env) == {"7_3", "7"}
    assert own_jobs({}) == set() and not outlive_own_stop(["1"], {})
