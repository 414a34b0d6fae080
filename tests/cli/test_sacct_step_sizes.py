"""``fusesched sacct``'s rows of jobs the controller ended and of their steps, as Slurm's: a
cancelled or timed-out job's row is ``0:0`` and its script's ``.batch`` row ``CANCELLED
0:15``; a step still running is ``RUNNING`` with no End; a step's NTasks and AllocCPUS are
its own (its tasks in all × the job's CPUs per task), with the fallbacks for rows stored
before or jobs whose task groups differ."""

from __future__ import annotations

import re
from typing import Any

import pytest

from fusesched.cli import sacct_format as sf
from fusesched.cli import sacct_steps as st

NOW = 1_000_000.0
FIELDS = "JobID,State,ExitCode,End,NTasks,AllocCPUS,CPUTimeRaw"


def task(task_id: str, code: int | None = 0, end: float | None = NOW - 10, **extra: Any) -> dict:
    return {
        "task_id": task_id,
        "node": "n1",
        "group": "remote" if ".remote." in task_id else "main",
        "exit_code": code,
        "start_time": NOW - 50,
        "end_time": end,
        **extra,
    }


def job(tasks: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "9",
        "state": "Failed",
        "phase": "timeout",
        "exit_code": -15,
        "reason": "walltime exceeded",
        "cpus": 8.0,
        "cpus_per_task": 2.0,
        "nodes": ["n1", "n2"],
        "submit_time": NOW - 60,
        "start_time": NOW - 50,
        "end_time": NOW - 10,
        "batch": True,
        "tasks": tasks,
    }
    base.update(fields)
    return base


def table(the_job: dict[str, Any]) -> dict[str, list[str]]:
    columns = sf.parse_format(FIELDS)
    rows = {the_job["id"]: sf.values(columns, the_job, {}, NOW)[1:]}
    for view, used in st.step_rows(the_job, sf.sacct_state(the_job)):
        rows[view["id"]] = sf.values(columns, view, used, NOW)[1:]
    return rows


@pytest.mark.parametrize(
    ("phase", "reason", "state"),
    [
        ("timeout", "walltime exceeded", "TIMEOUT"),
        ("cancelled", "by alice", "CANCELLED"),
        ("cancelled", "DeadLine: it could not end by its deadline", "DEADLINE"),
        ("cancelled", "preempted, not requeued", "PREEMPTED"),
    ],
)
def test_a_job_the_controller_ended_shows_0_0_and_its_steps_the_signal(
    phase: str, reason: str, state: str
) -> None:
    tasks = [
        task("9.main.0", code=-15),
        task("9.remote.1", step_id=0, step_tasks=1),  # (ended on its own before)
        task("9.remote.2", code=-9, step_id=1, step_tasks=1),
    ]
    shown = table(job(tasks, phase=phase, reason=reason))
    assert [row[:2] for row in shown.values()] == [
        [state, "0:0"],
        ["CANCELLED", "0:15"],
        ["COMPLETED", "0:0"],
        ["CANCELLED", "0:9"],
    ]


def test_a_failed_or_completed_jobs_own_code_stays() -> None:
    for phase, code, text in [
        ("failed", 3, "3:0"),
        ("failed", -11, "0:11"),
        ("completed", 0, "0:0"),
    ]:
        shown = table(job([task("9.main.0", code=code)], phase=phase, exit_code=code))
        assert shown["9"][1] == shown["9.batch"][1] == text


def test_a_step_still_running_has_no_end() -> None:
    tasks = [task("9.main.0", code=None, end=None), task("9.remote.1", None, None, step_id=0)]
    shown = table(job(tasks, state="Running", phase="running", exit_code=None, end_time=None))
    assert shown["9.0"][:3] == ["RUNNING", "0:0", "Unknown"]
    assert shown["9.batch"][:3] == ["RUNNING", "0:0", "Unknown"]


def test_a_steps_ntasks_and_alloc_cpus_are_its_own() -> None:
    tasks = [
        task("9.main.0"),
        # srun -n 3 over both nodes: three tasks, each its slot of 2 CPUs
        *(task(f"9.remote.{i}", step_id=0, step_tasks=3) for i in (1, 2, 3)),
        # an MPI step of 4 ranks: mpirun (its share) and a daemon (none)
        task("9.remote.4", step_id=1, step_tasks=4),
        task("9.remote.5", step_id=1, node="n2"),
    ]
    shown = table(job(tasks, phase="completed", state="Completed", exit_code=0))
    assert shown["9.0"][3:] == ["3", "6", str(6 * 40)]
    assert shown["9.1"][3:] == ["4", "8", str(8 * 40)]
    assert shown["9.batch"][3:5] == ["1", "4"]  # (the job's CPUs on its first of 2 nodes)


def test_without_step_sizes_or_cpus_per_task_the_estimates_stay() -> None:
    # tasks stored before migration 0009 held step sizes: NTasks counts them
    tasks = [task("9.main.0"), task("9.remote.1", step_id=0), task("9.remote.2", step_id=0)]
    shown = table(job(tasks, phase="completed", cpus=12.0, cpus_per_task=None))
    assert shown["9.0"][3:5] == ["2", "6"]  # (2 tasks; the job's CPUs on 1 of its 2 nodes)
    shown = table(job(tasks, phase="completed", cpus=12.0))
    assert shown["9.0"][3:5] == ["2", "4"]  # (2 tasks × 2 CPUs)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("17.99999999999999999999", "a step number of 1 to 9 digits"),
        ("17.x", "a step number (17.0), 17.batch or 17.extern"),
        (".1", "bad job id '.1'"),
        ("17.1.2", "bad job step '1.2'"),
    ],
)
def test_bad_steps_say_what_is_wrong(given: str, said: str) -> None:
    with pytest.raises(ValueError, match=re.escape(said)):
        st.parse_job_steps([given])
