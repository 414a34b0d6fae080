"""A batch task started in the folder its job was submitted from (``TaskLaunch.submit_dir``,
sbatch's default working directory), with real processes: it runs there when the node has
the folder and the task's user can reach it; otherwise it runs in its task folder, says so in
its log's first line and among its notes (the job's events), and its output files in that
folder are not written (no ``tee`` error in its log: the log has all of its output)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from fusesched.agent.runtime import ProcessRuntime
from fusesched.agent.users import Identity
from fusesched.api.wire import TaskLaunch, TaskReport, TaskState

from .helpers import read_all

WHO = Identity("someone", 234567, 234568)
SCRIPT = 'echo "in $(pwd)"\necho oops >&2\n'


def batch(task_id: str, folder: str, **fields: object) -> TaskLaunch:
    return TaskLaunch.model_validate(
        {"task_id": task_id, "job_id": task_id.split(".")[0], "script": SCRIPT}
        | {"submit_dir": folder, **fields}
    )


def run(rt: ProcessRuntime, spec: TaskLaunch) -> tuple[list[TaskReport], str]:
    """Every report of ``spec``'s task until its end, and its log."""
    rt.start(spec)
    reports: list[TaskReport] = []
    deadline = time.monotonic() + 10
    while not reports or reports[-1].state is TaskState.RUNNING:
        reports.extend(r for r in rt.poll() if r.task_id == spec.task_id)
        assert time.monotonic() < deadline, reports
        time.sleep(0.01)
    return reports, read_all(rt, spec.task_id)


def notes(reports: list[TaskReport]) -> str:
    return " ".join(r.reason for r in reports if r.state is TaskState.RUNNING)


def test_it_runs_in_the_folder_it_was_submitted_from(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    rt = ProcessRuntime(tmp_path / "work")
    try:
        reports, log = run(rt, batch("1.main.0", str(folder), output_file=f"{folder}/o.txt"))
    finally:
        rt.shutdown(grace_s=0.2)
    assert reports[-1].exit_code == 0, log
    assert log == f"in {folder}\noops\n"
    assert (folder / "o.txt").read_text() == log
    assert "task folder" not in notes(reports)


def test_a_folder_this_node_lacks_leaves_it_in_its_task_folder(tmp_path: Path) -> None:
    missing = tmp_path / "elsewhere"
    rt = ProcessRuntime(tmp_path / "work")
    spec = batch("2.main.0", str(missing), output_file=f"{missing}/slurm-2.out")
    try:
        reports, log = run(rt, spec)
    finally:
        rt.shutdown(grace_s=0.2)
    assert reports[-1].exit_code == 0, log
    said = notes(reports)
    assert said.startswith(f"the job runs in its task folder: {missing}, the folder it was ")
    assert f"its output file {missing}/slurm-2.out is not written" in said
    task_dir = tmp_path / "work" / "tasks" / "2.main.0"
    assert log == f"fusesched: {said}\nin {task_dir}\noops\n"  # (no tee error)
    # an output file elsewhere is still written; a -D (workdir) is not second-guessed
    out = tmp_path / "kept.txt"
    rt = ProcessRuntime(tmp_path / "work2")
    try:
        reports, log = run(rt, batch("3.main.0", str(missing), output_file=str(out)))
        assert out.read_text() == "in " + log.split("\nin ", 1)[1]  # (its line: the log's)
        assert "not written" not in notes(reports)
        failed, _ = run(rt, batch("4.main.0", str(missing), workdir=str(missing)))
    finally:
        rt.shutdown(grace_s=0.2)
    assert failed[-1].state is TaskState.FAILED_TO_START
    assert "working directory does not exist" in failed[-1].reason


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches users")
def test_the_tasks_user_must_reach_the_folder(shared: Path) -> None:
    private = shared / "private"
    private.mkdir(mode=0o700)  # root's: its task's user cannot enter it
    open_to_all = shared / "open"
    open_to_all.mkdir(mode=0o777)
    rt = ProcessRuntime(shared / "work", identities=lambda _user: WHO)
    try:
        shut, log = run(rt, batch("5.main.0", str(private), output_file=f"{private}/o"))
        assert log.endswith(f"\nin {shared / 'work' / 'tasks' / '5.main.0'}\noops\n")
        assert "by someone (uid 234567)" in notes(shut) and not (private / "o").exists()
        reports, log = run(rt, batch("6.main.0", str(open_to_all), output_file="/dev/null"))
    finally:
        rt.shutdown(grace_s=0.2)
    assert log == f"in {open_to_all}\noops\n", notes(reports)
