"""``-V``/``--version`` of every command by Slurm's name: the one line Slurm's commands print
(``slurm 22.05.0``), read as the tools that detect Slurm read it, and nothing else done:
sbatch reads no script and submits nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.cli.conftest import Script

from fusesched.agent.step_args import mpi_listing
from fusesched.cli import fast
from fusesched.cli.salloc_plan import split_salloc_args
from fusesched.cli.srun_args import split_run_args
from fusesched.slurm_release import version_line
from fusesched.submit.sbatch_words import asks_version, split_sbatch_words

#: The ``fusesched`` console script as installed (entry point: the quick path first).
COMMAND = [sys.executable, "-c", "from fusesched.cli.entry import main; main()"]
SCRIPT = "#!/bin/bash\necho hi\n"


def test_the_line_reads_as_slurms_to_the_tools_that_read_it() -> None:
    out = version_line() + "\n"  # (as printed)
    assert out == "slurm 22.05.0\n"
    # a pattern on the first line (law's get_slurm_version of `sbatch --version`)
    found = re.match(r"^slurm (\d+)\.(\d+)\.(\d+).*$", out.strip().split("\n")[0])
    assert found is not None and tuple(map(int, found.groups())) == (22, 5, 0)
    # the whole output in two words (OSG's Gratia probe: `name, version = out.split()`)
    name, version = out.split()
    assert (name, version) == ("slurm", "22.05.0")
    # the second word's numbers (`sinfo -V` readers: int() of each)
    assert tuple(int(v) for v in out.strip().split(" ")[1].split(".")) == (22, 5, 0)
    # what follows "slurm" split on dots (slurm-factory's slurm_version_info)
    assert tuple(int(x) for x in out.replace("slurm", "").strip().split(".")) == (22, 5, 0)
    assert out.startswith("slurm")  # (signac, chapel, shell scripts: `[[ $v == slurm* ]]`)


def _run(
    args: list[str],
    stdin: str | None = None,
    url: str = "http://127.0.0.1:9",
    cwd: Path | None = None,
) -> tuple[int, str, str]:
    env = {**os.environ, "FUSESCHED_CONTROLLER": url}
    done = subprocess.run(
        [*COMMAND, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


SLURM_COMMANDS = [
    "sbatch",
    "srun",
    "salloc",
    "squeue",
    "sacct",
    "sinfo",
    "scontrol",
    "scancel",
    "sshare",
    "sprio",
    "sacctmgr",
]


@pytest.mark.parametrize("option", ["--version", "-V"])
@pytest.mark.parametrize("command", SLURM_COMMANDS)
def test_every_slurm_command_prints_the_line_and_stops(command: str, option: str) -> None:
    # (no controller answers at the URL: a command that went on would fail)
    assert _run([command, option]) == (0, version_line() + "\n", "")


@pytest.mark.parametrize(
    "args",
    [
        ["sbatch", "--version"],
        ["sbatch", "-V"],
        ["sbatch", "-HV"],
        ["sbatch", "-n", "2", "--version", "--parsable"],
        ["sbatch", "--version", "job.sh"],
        ["sbatch", "-V", "--wrap=hostname"],
        ["sbatch", "--version", "--test-only", "job.sh"],
        ["sbatch", "--version", "--wait", "job.sh"],
    ],
)
def test_sbatch_version_reads_no_script_and_submits_nothing(
    server: tuple[str, Script], tmp_path: Path, args: list[str]
) -> None:
    url, script = server
    (tmp_path / "job.sh").write_text(SCRIPT)
    assert _run(args, stdin=SCRIPT, url=url, cwd=tmp_path) == (0, version_line() + "\n", "")
    assert script.received == []


def test_sbatch_version_as_a_value_or_the_scripts_argument_is_not_sbatchs(
    server: tuple[str, Script], tmp_path: Path
) -> None:
    """``-J -V`` names the job ``-V``; after the script ``-V`` is the script's argument: both
    submit the job, as Slurm's sbatch does."""
    url, script = server
    (tmp_path / "job.sh").write_text(SCRIPT)
    rc, out, _ = _run(["sbatch", "-J", "-V"], stdin=SCRIPT, url=url, cwd=tmp_path)
    assert (rc, out) == (0, "Submitted batch job 7\n")
    assert script.received[-1]["body"]["files"][0]["args"] == ["-J", "-V"]
    script.body = b'{"id": "8", "ids": ["8"], "warnings": []}'  # (the full command's POST)
    rc, out, _ = _run(["sbatch", "job.sh", "--version"], url=url, cwd=tmp_path)
    assert (rc, out) == (0, "Submitted batch job 8\n")
    assert script.received[-1]["body"]["script_args"] == ["--version"]


def test_the_quick_path_hands_the_version_to_the_full_command() -> None:
    """``fast.run`` returns None (the full command's) before reading standard input."""
    assert fast.run("sbatch", ["--version"]) is None
    assert fast.run("sbatch", ["-n1", "-V", "--controller", "http://127.0.0.1:9"]) is None


@pytest.mark.parametrize(
    ("words", "asked"),
    [
        (["--version"], True),
        (["-V"], True),
        (["-HV"], True),
        (["-Hv", "-V"], True),
        (["-n", "2", "--version"], True),
        (["-n2", ":", "-V"], True),
        (["-J", "-V"], False),  # (the job's name)
        (["--job-name", "--version"], False),
        (["-JV"], False),  # (-J's value: "V")
        (["-HJ", "-V"], False),
        (["--version=1"], False),  # (refused by the job's parser, as Slurm's sbatch refuses it)
        (["--frobnicate", "-V"], True),
        ([], False),
    ],
)
def test_which_words_ask_for_the_version(words: list[str], asked: bool) -> None:
    assert asks_version(words) is asked


def test_after_the_script_every_word_is_the_scripts() -> None:
    split = split_sbatch_words(["-n", "1", "job.sh", "-V", "--version"])
    assert asks_version(split.options) is False
    assert split.script_args == ["-V", "--version"]


@pytest.mark.parametrize(
    "args", [["--version"], ["-V"], ["-n", "2", "-V", "hostname"], ["-l", "--version"]]
)
def test_srun_and_salloc_read_the_version_option(args: list[str]) -> None:
    assert split_run_args(args).version
    assert split_salloc_args(args).run.version


def test_a_commands_version_option_is_the_commands_argument() -> None:
    """After the command every word is the command's (``srun hostname -V``)."""
    parsed = split_run_args(["hostname", "-V"])
    assert not parsed.version and parsed.command == ("hostname", "-V")


@pytest.mark.parametrize("args", [["--version"], ["-V"], ["-n", "2", "--version", "hostname"]])
def test_srun_in_a_job_prints_the_same_line(args: list[str]) -> None:
    """The agent's srun (a batch script's, a salloc shell's) prints what the others print."""
    assert mpi_listing(args) == version_line() + "\n"
