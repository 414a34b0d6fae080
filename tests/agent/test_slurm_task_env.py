"""What the agent itself tells a task with Slurm's variables (a job submitted as Slurm's:
``SLURM_JOB_ID`` in its launch), as Slurm's ``slurmstepd`` tells it: the uid and gid it runs
as (``SLURM_JOB_UID``, ``SLURM_JOB_GID``; under a switch, ``SLURM_JOB_USER`` that identity's
name) and its own process id (``SLURM_TASK_PID``, the shim's, which ``exec`` hands on).
Real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.task_env import slurm_identity_env
from fusesched.agent.task_shim import _SHIM, _SHIM_CD, _SHIM_ENV, _exports, _shim
from fusesched.agent.users import Identity
from fusesched.api.wire import TaskReport, TaskState

from .helpers import launch, read_all, wait_end

SHOW = 'echo "$SLURM_TASK_PID $$ $SLURM_JOB_UID $SLURM_JOB_GID $SLURM_JOB_USER"'
SLURM = {"SLURM_JOB_ID": "7", "SLURM_JOB_USER": "ann"}


def first_poll(runtime: ProcessRuntime, task_id: str) -> tuple[int | None, TaskReport | None]:
    """The task's pid as its RUNNING report says it, and its end report if that first poll
    carried it too (a task that ended at once: the next polls will not repeat it)."""
    pid, ended = None, None
    for report in runtime.poll():
        if report.task_id == task_id and report.state is TaskState.RUNNING:
            pid = report.pid
        elif report.task_id == task_id:
            ended = report
    return pid, ended


@pytest.mark.parametrize("script", [False, True], ids=["argv", "batch-script"])
def test_a_slurm_task_is_told_its_pid_and_identity(runtime: ProcessRuntime, script: bool) -> None:
    fields = {"script": f"#!/bin/sh\n{SHOW}\n"} if script else {}
    argv = () if script else ("sh", "-c", SHOW)
    runtime.start(launch("7.main.0", *argv, env=SLURM, **fields))
    pid, report = first_poll(runtime, "7.main.0")
    if report is None:  # (not ended by the first poll)
        report = wait_end(runtime, "7.main.0")["7.main.0"]
    assert report.exit_code == 0
    told, own, uid, gid, user = read_all(runtime, "7.main.0").split()
    assert told == own  # the task's own process id
    assert pid is None or int(told) == pid  # (the one the agent reports, when it saw it run)
    assert (uid, gid) == (str(os.getuid()), str(os.getgid()))  # (the agent's: no switch)
    assert user == "ann"  # the controller's (the job's user): the agent switches to no one


def test_a_task_without_slurms_variables_is_told_none(runtime: ProcessRuntime) -> None:
    runtime.start(launch("8.main.0", "sh", "-c", SHOW))
    wait_end(runtime, "8.main.0")
    assert len(read_all(runtime, "8.main.0").split()) == 1  # ($$ alone)


def test_under_a_switch_the_identity_switched_to() -> None:
    who = Identity("alice", 201_234, 201_235)
    assert slurm_identity_env(who) == {
        "SLURM_JOB_UID": "201234",
        "SLURM_JOB_GID": "201235",
        "SLURM_JOB_USER": "alice",
    }
    own = slurm_identity_env(None)
    assert own == {"SLURM_JOB_UID": str(os.getuid()), "SLURM_JOB_GID": str(os.getgid())}


@pytest.mark.skipif(shutil.which("dash") is None and shutil.which("bash") is None, reason="sh")
@pytest.mark.parametrize("which", ["plain", "enters-folder", "from-file"])
def test_every_shim_tells_the_pid_it_hands_on(which: str, tmp_path: Path) -> None:
    """Each of the shims (the agent's identity; a switch in the child, which enters the
    folder itself; setpriv's, which reads the job's environment from its file) exports the
    pid ``exec`` keeps, after the job's own variables (a stale one passed on loses)."""
    env_file = tmp_path / ".fusesched-env"
    env_file.write_text(_exports({"SLURM_TASK_PID": "1"}))
    shim, before = {
        "plain": (_SHIM, []),
        "enters-folder": (_SHIM_CD, [str(tmp_path)]),
        "from-file": (_SHIM_ENV, [str(env_file), str(tmp_path)]),
    }[which]
    done = subprocess.run(
        ["/bin/sh", "-c", _shim(shim, None, True), "fusesched-task", *before, "sh", "-c", SHOW],
        input="go\n",
        capture_output=True,
        text=True,
        timeout=10,
        env={"PATH": "/usr/bin:/bin", "SLURM_TASK_PID": "1"},
    )
    told, own = done.stdout.split()[:2]
    assert told == own != "1", (done.stdout, done.stderr)
    assert _shim(shim, None) == shim  # (not asked: as before)
