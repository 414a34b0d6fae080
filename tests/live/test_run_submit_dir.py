"""``fusesched run`` starts its tasks in the folder it runs in, as srun does (``submit_dir``):
``-D`` wins (a relative one is relative to that folder), and a folder the job's user cannot
enter on its node falls back to the task's own folder, as sbatch's script does, saying so
first. Real subprocesses against a live cluster of real agents."""

from __future__ import annotations

from pathlib import Path

from tests.live.test_cli import PYTHON
from tests.live.test_cli_run_wait import run_in

from fusesched.cli.local import LocalCluster


def test_run_starts_in_the_folder_it_runs_in(cluster: LocalCluster, scratch: Path) -> None:
    here = run_in(scratch, cluster, PYTHON, "run", "-Q", "pwd")
    assert here.returncode == 0, here.stderr
    assert here.stdout == f"{scratch}\n"
    # every task, with Slurm's variable; no output file beside them (run prints the output)
    both = run_in(
        scratch, cluster, PYTHON, "run", "-Q", "-n", "2", "sh", "-c", "pwd; echo $SLURM_SUBMIT_DIR"
    )
    assert both.returncode == 0, both.stderr
    assert both.stdout.splitlines() == [str(scratch)] * 4
    assert not list(scratch.glob("slurm-*.out"))
    (scratch / "sub").mkdir(mode=0o777)
    relative = run_in(scratch, cluster, PYTHON, "run", "-Q", "-D", "sub", "pwd")
    assert relative.stdout == f"{scratch / 'sub'}\n", relative.stderr
    absolute = run_in(scratch, cluster, PYTHON, "run", "-Q", "--chdir=/", "pwd")
    assert absolute.stdout == "/\n", absolute.stderr


def test_a_folder_its_user_cannot_enter_runs_it_in_its_task_folder(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """pytest's folders are root's own (0700); the tasks run as an unprivileged user."""
    moved = run_in(tmp_path, cluster, PYTHON, "run", "-Q", "pwd")
    assert moved.returncode == 0, moved.stderr
    note, where = moved.stdout.splitlines()
    assert note.startswith(f"fusesched: the job runs in its task folder: {tmp_path}, the folder ")
    assert "cannot be entered" in note and "output file" not in note
    assert Path(where).name.endswith(".main.0") and Path(where).parent.name == "tasks"
