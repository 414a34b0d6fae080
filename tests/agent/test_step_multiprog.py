"""``srun --multi-prog`` (agent/step_multiprog.py): the configuration read as Slurm's srun
reads it, each task's own command from it (agent/step_files.py), run for real through the
task's start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fusesched.agent.step_files import START_MODULE, redirected, split_files
from fusesched.agent.step_multiprog import parse_config, read_config
from fusesched.agent.step_plan import StepError, StepTask, place

SILLY = """\
###################################################################
# srun multiple program configuration file (Slurm's example)
###################################################################
4-6       hostname
1,7       echo  task:%t
0,2-3     echo  offset:%o
"""


def test_slurms_example() -> None:
    config = parse_config("silly.conf", SILLY)
    assert config.argv(1) == ("echo", "task:1")
    assert config.argv(7) == ("echo", "task:7")
    assert [config.argv(r) for r in (0, 2, 3)] == [
        ("echo", "offset:0"),
        ("echo", "offset:1"),
        ("echo", "offset:2"),
    ]
    assert config.argv(5) == ("hostname",)
    assert config.argv(8) is None
    assert config.argv(1, ["--x"]) == ("echo", "task:1", "--x")  # (srun's own arguments)


def test_star_quotes_and_percent_signs() -> None:
    config = parse_config("c", "0 sh -c 'echo a  b %t'\n* ./worker --id=%t%%\n")
    assert config.argv(0) == ("sh", "-c", "echo a  b 0")
    assert config.argv(3) == ("./worker", "--id=3%%")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "names no program"),
        ("# only a comment\n", "names no program"),
        ("0\n", "line 1: no program"),
        ("x echo\n", "is not ranks"),
        ("3-1 echo\n", "is not a range"),
        ("0 a\n0-1 b\n", "task 0 is named twice"),
        ("* a\n1 b\n", "must be the last line"),
        ("0 echo 'open\n", "quote is not closed"),
    ],
)
def test_bad_configurations_say_why(text: str, message: str) -> None:
    with pytest.raises(StepError, match=message):
        parse_config("c", text)


def test_an_unreadable_configuration_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StepError, match="cannot read"):
        read_config(str(tmp_path / "missing.conf"))


def test_each_task_runs_its_own_line(tmp_path: Path) -> None:
    conf = tmp_path / "mp.conf"
    conf.write_text("0 echo first %t\n1-2 echo rest %t %o\n")
    files, rest = split_files(["-n", "4", "--multi-prog", str(conf), "extra"])
    assert rest == ["-n", "4", "--multi-prog", str(conf), "extra"]
    tasks, _ = place([("a", 4)], 4, None, None)
    commands = redirected(files, tasks, {}, [str(conf), "extra"], sys.executable)
    assert commands[0] == ("echo", "first", "0", "extra")
    assert commands[2] == ("echo", "rest", "2", "1", "extra")
    # a task no line names fails, saying so, as Slurm's
    assert commands[3][:5] == (sys.executable, "-I", "-m", START_MODULE, "--fail")
    done = subprocess.run(commands[3], capture_output=True, text=True, check=False)
    assert done.returncode == 1
    assert "names no program for task 3" in done.stderr


def test_a_bad_configuration_stops_srun_before_the_step(tmp_path: Path) -> None:
    conf = tmp_path / "mp.conf"
    conf.write_text("zero echo\n")
    with pytest.raises(StepError, match="is not ranks"):
        split_files(["--multi-prog", str(conf)])


def test_output_files_and_the_start_wrap_each_tasks_own(tmp_path: Path) -> None:
    conf = tmp_path / "mp.conf"
    conf.write_text("* echo %t\n")
    files, _ = split_files(["-o", "out-%t", "-D", "sub", "--multi-prog", str(conf)])
    (task,) = [StepTask(0, "a", 0, 0, 1)]
    (command,) = redirected(files, [task], {}, [str(conf)], "py")
    assert command == (
        "py", "-I", "-m", START_MODULE, "--chdir", "sub", "--",
        "py", "-I", "-m", "fusesched.step_output", "out-%t", "", "truncate", "echo", "0",
    )  # fmt: skip
