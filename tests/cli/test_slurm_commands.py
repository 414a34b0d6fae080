"""Slurm's command names: ``fusesched squeue``, ``scancel``, ``srun``, ``seff``, ``sshare``,
``sprio`` (the same commands as ``jobs``, ``cancel``…, registered twice) and ``fusesched
slurm-commands install|uninstall|list``'s scripts, run as a tool would run them (real
processes): they pass their arguments and environment on, and never replace a real Slurm's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fusesched.agent.step_args import MPI_LIST
from fusesched.cli import entry
from fusesched.cli.main import app
from fusesched.cli.slurm_commands import MARK, NAMES, fusesched_command
from fusesched.cli.slurm_names import SLURM_NAMES, _name

runner = CliRunner()


def test_slurms_names_are_the_same_commands_registered_twice() -> None:
    by_name = {_name(info): info for info in app.registered_commands}
    for slurm, own in SLURM_NAMES.items():
        assert by_name[slurm].callback is by_name[own].callback
        assert by_name[slurm].rich_help_panel == "Slurm's commands"
    help_text = runner.invoke(app, ["squeue", "--help"], prog_name="fusesched")
    assert help_text.exit_code == 0 and "Usage: fusesched squeue [OPTIONS]" in help_text.output
    assert "squeue's -u -t -p -j -n --me -h -o -O -r" in help_text.output  # (jobs' own help)


def test_they_start_as_quickly_as_the_other_client_commands() -> None:
    """They are in the client table (cli/entry.py): not the full command's (its simulator and
    policies)."""
    for name in (*SLURM_NAMES, "scontrol", "sacct", "sinfo", "sbatch", "salloc"):
        assert name in entry.CLIENT_COMMANDS, name
    command = [sys.executable, "-X", "importtime", "-m", "fusesched", "sacct", "--help"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "fusesched.cli.sacct" in imported
    assert not {"fusesched.cli.main", "fusesched.cli.simulate"} & imported


def _install(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fusesched", "slurm-commands", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_install_list_and_uninstall(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    done = _install("install", str(folder))
    assert done.returncode == 0, done.stderr
    assert f"installed in {folder}: {' '.join(NAMES)}" in done.stdout
    assert f"note: {folder} is not on PATH" in done.stderr
    for name in NAMES:
        text = (folder / name).read_text()
        assert text.splitlines()[1] == MARK
        assert text.endswith(f' {name} "$@"\n') and os.access(folder / name, os.X_OK)
    listed = _install("list", str(folder)).stdout
    assert f"{folder / 'sprio'}: fusesched's: " in listed
    (folder / "sbatch").unlink()
    assert f"{folder / 'sbatch'}: absent" in _install("list", str(folder)).stdout
    gone = _install("uninstall", str(folder))
    assert gone.returncode == 0 and sorted(os.listdir(folder)) == []


def test_a_real_slurm_command_is_never_replaced(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    real = folder / "sbatch"
    real.write_text("#!/bin/sh\necho the real sbatch\n")
    (folder / "squeue").symlink_to("/usr/bin/true")
    done = _install("install", str(folder))
    assert done.returncode == 1
    assert f"error: {real} is not fusesched's (a real Slurm's?): left alone" in done.stderr
    assert real.read_text() == "#!/bin/sh\necho the real sbatch\n"
    assert (folder / "squeue").is_symlink() and (folder / "scontrol").is_file()
    listed = _install("list", str(folder)).stdout
    assert f"{real}: another program's (left alone)" in listed
    _install("uninstall", str(folder))
    assert real.exists() and (folder / "squeue").is_symlink() and not (folder / "srun").exists()
    forced = _install("install", "--force", str(folder))
    assert forced.returncode == 0 and MARK in real.read_text()
    assert not (folder / "squeue").is_symlink()


def test_the_scripts_pass_arguments_and_environment_on(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    assert _install("install", str(folder), "--controller", "http://127.0.0.1:7").returncode == 0
    env = {"PATH": f"{folder}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def scontrol(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["scontrol", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, **extra},
            check=False,
        )

    assert scontrol("show", "hostnames", "n[1-3]").stdout == "n1\nn2\nn3\n"
    baked = scontrol("show", "job", "5")  # (the default --controller wrote into it)
    assert baked.returncode == 1 and "http://127.0.0.1:7" in baked.stderr
    given = scontrol("show", "job", "5", FUSESCHED_CONTROLLER="http://127.0.0.1:9")
    assert given.returncode == 1 and "http://127.0.0.1:9" in given.stderr


def test_install_says_which_real_slurm_commands_it_hides(tmp_path: Path) -> None:
    """Installed first on PATH, the scripts hide a real Slurm's commands further on (a
    fusesched Slurm pool on this host, which finds them on PATH, would run fusesched's):
    said, with the folder the pool should name."""
    folder, real = tmp_path / "bin", tmp_path / "slurm"
    real.mkdir()
    (real / "sbatch").write_text("#!/bin/sh\necho the real sbatch\n")
    (real / "sbatch").chmod(0o755)
    (real / "sinfo").write_text("not runnable\n")  # (not a program: nothing hidden)
    done = subprocess.run(
        [sys.executable, "-m", "fusesched", "slurm-commands", "install", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{folder}:{real}"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        f"note: {folder}'s sbatch now come before {real}'s on PATH (a real Slurm's?): what "
        "runs them with this PATH runs fusesched's (a fusesched Slurm pool of that Slurm on "
        f"this host: give it bin_dir: {real})\n"
    )


def test_srun_inside_an_allocation_runs_a_job_step(tmp_path: Path) -> None:
    """With the scripts first on PATH in a job (a batch script that activates the virtualenv
    they were installed in), ``srun`` is the agent's (a step of that job), never ``fusesched
    srun`` (which would submit a job of its own and wait for the allocation's resources)."""
    folder = tmp_path / "bin"
    assert _install("install", str(folder)).returncode == 0
    env = {"PATH": f"{folder}:/usr/bin:/bin", "HOME": str(tmp_path)}
    inside = {"SLURM_JOB_ID": "7", "FUSESCHED_JOB_ID": "7", "FUSESCHED_HOSTFILE": "/nowhere"}

    def srun(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["srun", *args], capture_output=True, text=True, timeout=60, env={**env, **extra}
        )

    listed = srun("--mpi=list", **inside)  # (the step's own answer: no controller asked)
    assert (listed.returncode, listed.stdout) == (0, MPI_LIST), listed.stderr
    step = srun("true", FUSESCHED_CONTROLLER="http://127.0.0.1:9", **inside)
    assert step.returncode == 2 and "srun: error: no hostfile at /nowhere" in step.stderr
    outside = srun("true", FUSESCHED_CONTROLLER="http://127.0.0.1:9")  # (fusesched run's)
    assert outside.returncode == 1
    assert "cannot reach the controller at http://127.0.0.1:9" in outside.stderr


def test_the_scripts_run_the_fusesched_beside_this_python() -> None:
    beside = Path(sys.executable).parent / "fusesched"
    if not beside.exists():
        pytest.skip("no fusesched command beside this Python")
    assert fusesched_command() == [str(beside.absolute())]


@pytest.mark.parametrize("command", [["sacct"], ["squeue"], ["scancel", "5"]])
def test_slurms_clusters_option_is_taken_for_this_one(command: list[str]) -> None:
    """Snakemake passes ``--clusters all`` (sacct) and ``--clusters=all`` (scancel)."""
    for taken in (["--clusters", "all"], ["--clusters=fusesched"], ["-M", "all,fusesched"]):
        done = runner.invoke(app, [*command, *taken, "--controller", "http://127.0.0.1:9"])
        assert done.exit_code == 1, done.output  # (past the options: the controller is away)
        assert "cannot reach the controller at http://127.0.0.1:9" in done.output
    other = runner.invoke(app, [*command, "-M", "cluster2"])
    assert other.exit_code == 2
    assert "no cluster 'cluster2'" in other.output
