"""``srun --output``, ``--error`` and ``--open-mode`` inside a job: taken out of srun's
command line (agent/step_files.py), each task started through :mod:`fusesched.step_output`,
which opens its files where it runs (real processes), and what srun empties first."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusesched.agent import step
from fusesched.agent.step_args import parse_args
from fusesched.agent.step_files import (
    REDIRECT_MODULE,
    StepFiles,
    emptied,
    empty,
    redirected,
    split_files,
)
from fusesched.agent.step_plan import StepError, export_vars, place

JOB_ENV = {
    "FUSESCHED_JOB_ID": "12",
    "SLURM_JOB_ID": "12",
    "SLURM_JOB_USER": "ada",
    "SLURM_JOB_NAME": "train",
    "PATH": "/usr/bin:/bin",
}


@pytest.mark.parametrize(
    ("argv", "files", "rest"),
    [
        (
            ["--unbuffered", "--output", "/x/%j_%t.out", "--error", "/x/e", "py", "-o", "y"],
            StepFiles("/x/%j_%t.out", "/x/e"),
            ["--unbuffered", "py", "-o", "y"],  # (the command's own -o stays)
        ),
        (["-lo", "f", "-n", "2", "cmd"], StepFiles("f"), ["-l", "-n", "2", "cmd"]),
        (["-lof", "-n2", "cmd"], StepFiles("f"), ["-l", "-n2", "cmd"]),
        (
            ["-n", "2", "-o", "f", "--open-mode=append", "c"],
            StepFiles("f", append=True),
            ["-n", "2", "c"],
        ),
        (["-J", "-o", "cmd"], StepFiles(), ["-J", "-o", "cmd"]),  # (-J's value is "-o")
        (["--job-name", "-o", "-e", "x", "cmd"], StepFiles(error="x"), ["--job-name", "-o", "cmd"]),
        (["-I5", "-o", "x", "cmd"], StepFiles("x"), ["-I5", "cmd"]),
        (["-e", "x", "--", "cmd", "-o"], StepFiles(error="x"), ["--", "cmd", "-o"]),
        (["--output=none", "cmd"], StepFiles("/dev/null"), ["cmd"]),
        (["--output=all", "cmd"], StepFiles(), ["cmd"]),
        (["--open-mode", "truncate", "cmd"], StepFiles(), ["cmd"]),
    ],
)
def test_srun_file_options_are_taken_out(
    argv: list[str], files: StepFiles, rest: list[str]
) -> None:
    assert split_files(argv) == (files, rest)
    parse_args(rest)  # (what is left is srun's to read)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["-o"], "-o needs a value"),
        (["--error"], "--error needs a value"),
        (["--open-mode=sometimes", "c"], "--open-mode takes append or truncate"),
        (["--output=3", "c"], "one task's output alone is not supported"),
        (["--output=", "c"], "--output needs a file name"),
    ],
)
def test_bad_file_options_are_refused(argv: list[str], says: str) -> None:
    with pytest.raises(StepError, match=says):
        split_files(argv)


TASKS, _ = place([("node-a", 2), ("node-b", 2)], 3, None, None)


def _modes(commands: list[tuple[str, ...]]) -> list[str]:
    return [command[6] for command in commands]


def test_each_task_starts_through_the_redirect_with_its_files() -> None:
    files = StepFiles("out-%t.txt", "err-%N.txt")
    commands = redirected(files, TASKS, JOB_ENV, ["python", "-u", "x.py"], "/venv/python")
    assert commands[0] == (
        "/venv/python",
        "-I",
        "-m",
        REDIRECT_MODULE,
        "out-%t.txt",
        "err-%N.txt",
        "append",  # (err-node-a.txt: two tasks share it)
        "python",
        "-u",
        "x.py",
    )
    assert _modes(commands) == ["append", "append", "truncate"]  # (node-b's task: its own)
    assert emptied(files, TASKS, JOB_ENV) == ["out-0.txt", "err-node-a.txt", "out-1.txt"]


def test_a_task_with_its_own_files_empties_them_itself() -> None:
    files = StepFiles("/logs/%j-%t.out")
    assert _modes(redirected(files, TASKS, JOB_ENV, ["c"], "py")) == ["truncate"] * 3
    assert emptied(files, TASKS, JOB_ENV) == []
    appending = StepFiles("/logs/all.out", append=True)
    assert _modes(redirected(appending, TASKS, JOB_ENV, ["c"], "py")) == ["append"] * 3
    assert emptied(appending, TASKS, JOB_ENV) == []


def test_a_shared_file_named_by_the_step_is_added_to() -> None:
    """The step's id (``%s``) is known only once the step starts: srun cannot empty it."""
    files = StepFiles("/logs/%j.%s.out")
    assert _modes(redirected(files, TASKS, JOB_ENV, ["c"], "py")) == ["append"] * 3
    assert emptied(files, TASKS, JOB_ENV) == []


def test_no_files_leave_the_command_alone() -> None:
    assert redirected(StepFiles(), TASKS, JOB_ENV, ["c", "-x"], "py") == [("c", "-x")] * 3


def test_the_launches_carry_each_tasks_redirect() -> None:
    options = parse_args(["-n", "3", "echo", "hi"])
    exported = export_vars("ALL", JOB_ENV)
    files = StepFiles("o-%t")
    sent = step._launches(options, JOB_ENV, TASKS, exported, "/work", False, (), files)
    for rank, launch in enumerate(sent):
        at = launch.argv.index(REDIRECT_MODULE)
        assert launch.argv[at - 3 : at] == [sys.executable, "-I", "-m"]
        assert launch.argv[at + 1 :] == ["o-%t", "", "truncate", "echo", "hi"]
        assert launch.env["SLURM_PROCID"] == str(rank)


# ---------------------------------------------------------------------- the redirect itself


def redirect(
    tmp_path: Path, output: str, error: str, mode: str, *command: str, **env: str
) -> subprocess.CompletedProcess[str]:
    task_env = {**JOB_ENV, "SLURM_PROCID": "1", "SLURM_NODEID": "0", "SLURM_STEP_ID": "4"}
    task_env |= {"SLURMD_NODENAME": "gpu7.lab", **env}
    return subprocess.run(
        [sys.executable, "-I", "-m", REDIRECT_MODULE, output, error, mode, *command],
        capture_output=True,
        text=True,
        env=task_env,
        cwd=tmp_path,
        timeout=30,
        check=False,
    )


SAY_BOTH = ("sh", "-c", "echo to-out; echo to-err >&2")


def test_the_task_writes_its_own_files(tmp_path: Path) -> None:
    done = redirect(tmp_path, "%x-%j.%s-%t.out", "%N-%u.err", "truncate", *SAY_BOTH)
    assert done.returncode == 0 and done.stdout == done.stderr == ""
    assert (tmp_path / "train-12.4-1.out").read_text() == "to-out\n"
    assert (tmp_path / "gpu7-ada.err").read_text() == "to-err\n"


def test_without_an_error_file_standard_error_joins_the_output(tmp_path: Path) -> None:
    (tmp_path / "o.txt").write_text("old\n")
    redirect(tmp_path, "o.txt", "", "append", *SAY_BOTH)
    assert (tmp_path / "o.txt").read_text() == "old\nto-out\nto-err\n"
    redirect(tmp_path, "o.txt", "o.txt", "truncate", *SAY_BOTH)  # (one file: opened once)
    assert (tmp_path / "o.txt").read_text() == "to-out\nto-err\n"


def test_an_error_file_alone_leaves_the_output_to_srun(tmp_path: Path) -> None:
    done = redirect(tmp_path, "", "e.txt", "truncate", *SAY_BOTH)
    assert done.stdout == "to-out\n" and (tmp_path / "e.txt").read_text() == "to-err\n"


def test_a_file_that_cannot_be_opened_ends_the_task(tmp_path: Path) -> None:
    done = redirect(tmp_path, "missing/o.txt", "", "truncate", *SAY_BOTH)
    assert done.returncode == 1 and not done.stdout
    said = "srun: error: could not open output file missing/o.txt: No such file or directory\n"
    assert done.stderr == said


def test_a_command_that_cannot_run(tmp_path: Path) -> None:
    done = redirect(tmp_path, "", "e.txt", "truncate", "no-such-program-here")
    assert done.returncode == 127
    assert "no-such-program-here" in (tmp_path / "e.txt").read_text()
    bad = redirect(tmp_path, "o.txt", "", "sometimes", "true")
    assert bad.returncode == 2 and "usage:" in bad.stderr


def test_srun_empties_a_shared_file_only_safely(tmp_path: Path) -> None:
    """srun empties a file its tasks share before they add to it: an existing regular file
    only, never through a link, never made by srun (the tasks make it as their own user: as
    root, srun would leave a root-owned file they cannot write); run as root, never a file of
    root's (the path is the job's to choose)."""
    theirs = tmp_path / "theirs.txt"
    theirs.write_text("old run\n")
    secret = tmp_path / "secret"
    secret.write_text("keep\n")
    link = tmp_path / "link.txt"
    link.symlink_to(secret)
    if os.geteuid() == 0:
        os.chown(theirs, 234567, 234567)
    for path in (theirs, link, tmp_path / "missing.txt"):
        empty(str(path))
    assert theirs.read_text() == ""
    assert secret.read_text() == "keep\n" and not (tmp_path / "missing.txt").exists()
    if os.geteuid() == 0:
        roots = tmp_path / "roots.txt"
        roots.write_text("root's\n")
        empty(str(roots))
        assert roots.read_text() == "root's\n"
