"""A job step inherits the ``BASH_ENV`` its batch script was given: the agent's own file (or
another node's agent's), which must never be read as the job's own. It was (f1fdd10): the
file then read itself until bash ran out of stack, so every ``srun bash …`` and every step
running a bash script (a pyenv shim, a wrapper) in a batch job died of SIGSEGV (exit 139)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.step_wrapper import agents_bash_env

from .helpers import launch, run_one

SHOW = 'echo "ok ${OWN_ENV_READ:-no}"; command -v srun'


@pytest.mark.parametrize("own", [False, True])
@pytest.mark.parametrize("whose", ["this agent", "another node's agent"])
def test_a_step_that_inherits_an_agents_bash_env_runs_bash(
    runtime: ProcessRuntime, tmp_path: Path, own: bool, whose: str
) -> None:
    if whose == "this agent":
        inherited = runtime.work_dir / "bin" / "bash_env"
    else:  # (a step on another node than its batch script's: that agent's file)
        other = tmp_path / "other-agent" / "bin"
        other.mkdir(parents=True)
        inherited = other / "bash_env"
        inherited.write_text((runtime.work_dir / "bin" / "bash_env").read_text())
    env = {"SLURM_JOB_ID": "7", "BASH_ENV": str(inherited)}
    if own:  # (the batch script's own BASH_ENV, kept by the agent, inherited too)
        mine = tmp_path / "own_env.sh"
        mine.write_text("OWN_ENV_READ=yes\n")
        env["FUSESCHED_BASH_ENV"] = str(mine)
    report, text = run_one(runtime, launch("7.0.0", "bash", "-c", SHOW, env=env))
    assert report.exit_code == 0, text
    said, srun = text.split()[:2], text.split()[2]
    assert said == ["ok", "yes" if own else "no"]
    assert srun == str(runtime.work_dir / "bin" / "srun")


def test_a_bash_env_that_names_itself_is_read_once(runtime: ProcessRuntime) -> None:
    """Whatever a job's variables say, the agent's file never reads itself again."""
    mine = str(runtime.work_dir / "bin" / "bash_env")
    env = {"SLURM_JOB_ID": "8", "FUSESCHED_BASH_ENV": mine}
    report, text = run_one(runtime, launch("8.0.0", "bash", "-c", "echo fine", env=env))
    assert (report.exit_code, text) == (0, "fine\n")


def test_which_files_are_an_agents() -> None:
    assert agents_bash_env("/var/lib/fusesched/agent/bin/bash_env")
    assert not agents_bash_env("/home/ann/.bashrc")
    assert not agents_bash_env("/home/ann/bash_env")
