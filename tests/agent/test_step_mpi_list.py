"""``srun --mpi=list`` in a job: Slurm's list of the MPI plugin types (those fusesched's
steps take) on stdout, exit 0, and no step started — with or without a command."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fusesched.agent.step import main
from fusesched.agent.step_args import MPI_LIST, mpi_listing
from fusesched.agent.step_wrapper import install_wrapper

LISTED = "MPI plugin types are...\n\tnone\n\tpmi2\n\tpmix\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["--mpi=list"],
        ["--mpi", "list"],
        ["-n", "2", "--mpi=list", "hostname"],
        ["-l", "--mpi=list"],
    ],
)
def test_list_is_asked(argv: list[str]) -> None:
    assert mpi_listing(argv) == MPI_LIST == LISTED


@pytest.mark.parametrize(
    "argv", [["--mpi=pmix", "a.out"], ["hostname", "--mpi=list"], ["--bogus", "--mpi=list"], []]
)
def test_list_is_not_asked(argv: list[str]) -> None:
    assert mpi_listing(argv) is None


def test_main_prints_it_and_starts_no_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FUSESCHED_JOB_ID", "7")
    monkeypatch.setenv("FUSESCHED_CONTROLLER", "http://127.0.0.1:9")  # (nothing listens)
    assert main(["--mpi=list", "-n", "4", "a.out"]) == 0
    assert capsys.readouterr() == (LISTED, "")
    assert main(["--mpi=pmix"]) == 2  # (another type still needs a command)
    assert "no command to run" in capsys.readouterr().err


def test_the_srun_a_job_runs(tmp_path: Path) -> None:
    """The ``srun`` a job's script finds on its PATH (the agent's wrapper), as a process."""
    srun = install_wrapper(tmp_path) / "srun"
    done = subprocess.run(
        [str(srun), "--mpi=list"], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, LISTED, "")
