"""A step's task start (fusesched/step_start.py) for ``srun -D``, ``-t``, ``--signal``,
``--task-prolog`` and ``--task-epilog``, run for real as a task runs it, and the settings
srun gives it (agent/step_files.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fusesched import step_start
from fusesched.agent.step_args import parse_args
from fusesched.agent.step_files import split_files, start_settings


def start(
    settings: list[str], command: list[str], cwd: Path, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-m", "fusesched.step_start", *settings, "--", *command],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        check=False,
        start_new_session=True,  # (a task's first process leads its group, as the agent starts it)
        env=os.environ | {"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "3", "SLURMD_NODENAME": "n1"},
    )


def script(path: Path, text: str) -> str:
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return str(path)


def test_settings_from_the_options() -> None:
    options = parse_args(
        ["-D", "d", "-t", "2", "--signal=USR2@30", "--task-prolog=p", "--task-epilog=e", "x"], {}
    )
    assert start_settings(options) == (
        "--chdir", "d", "--prolog", "p", "--time", "120", "--signal", "12@30", "--epilog", "e"
    )  # fmt: skip
    assert start_settings(parse_args(["--signal=USR1", "x"], {})) == ()  # (no limit: nothing)
    assert start_settings(parse_args(["-t", "1", "--signal=USR1@600", "x"], {}))[-1] == "10@60"
    files, _ = split_files(["-n", "2", "x"])
    assert files.start == ()


def test_chdir_relative_to_where_the_task_starts(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    done = start(["--chdir", "sub"], ["pwd"], tmp_path)
    assert done.stdout.strip() == str(tmp_path / "sub")
    missing = start(["--chdir", "/no/such/dir"], ["pwd"], tmp_path)
    assert missing.returncode == 0  # (as slurmstepd: said, and the task runs where it is)
    assert "couldn't chdir to `/no/such/dir'" in missing.stderr
    assert missing.stdout.strip() == str(tmp_path)


SHOW = 'echo "FOO=$FOO GONE=${GONE-unset}"'


def test_task_prolog_sets_the_tasks_variables(tmp_path: Path) -> None:
    prolog = script(
        tmp_path / "prolog",
        'echo export FOO=bar\necho "print hello from $SLURM_TASK_PID"\necho unset GONE\n',
    )
    done = subprocess.run(
        [sys.executable, "-m", "fusesched.step_start", "--prolog", prolog, "--", "sh", "-c", SHOW],
        capture_output=True,
        text=True,
        env=os.environ | {"GONE": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("hello from ")
    assert lines[1] == "FOO=bar GONE=unset"


def test_a_failing_prolog_ends_the_task_with_its_status(tmp_path: Path) -> None:
    prolog = script(tmp_path / "prolog", "exit 3\n")
    done = start(["--prolog", prolog], ["echo", "ran"], tmp_path)
    assert (done.returncode, done.stdout) == (3, "")
    assert "--task-prolog failed status=3" in done.stderr


def test_task_epilog_runs_after_the_task(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    epilog = script(tmp_path / "epilog", f'echo noise; echo "$SLURM_JOB_ID" > {mark}\n')
    done = start(["--epilog", epilog], ["sh", "-c", "echo ran; exit 4"], tmp_path)
    assert (done.returncode, done.stdout) == (4, "ran\n")  # (its output discarded, as Slurm's)
    assert mark.read_text() == "12\n"


def test_time_limit_ends_the_task(tmp_path: Path) -> None:
    began = time.monotonic()
    done = start(["--time", "1"], ["sleep", "20"], tmp_path)
    assert time.monotonic() - began < 10
    assert done.returncode == 128 + 15
    assert "*** STEP 12.3 ON n1 CANCELLED AT " in done.stderr
    assert "DUE TO TIME LIMIT ***" in done.stderr


def test_signal_comes_before_the_time_limit(tmp_path: Path) -> None:
    body = "trap 'echo warned; exit 7' USR1; sleep 20 & wait"
    done = start(["--time", "3", "--signal", "10@2"], ["sh", "-c", body], tmp_path)
    assert (done.returncode, done.stdout) == (7, "warned\n")
    assert "TIME LIMIT" not in done.stderr


def test_a_missing_program_and_bad_usage(tmp_path: Path) -> None:
    done = start(["--time", "5"], ["no-such-program-here"], tmp_path)
    assert done.returncode == 127
    assert start([], ["no-such-program-here"], tmp_path).returncode == 127
    assert step_start.main(["--chdir"]) == 2
