"""What ``fusesched sacct`` reads of a job step's size, through the controller: each task of a
step keeps the step's tasks in all (``step_tasks``: ``srun -n``, an MPI step's ranks, not
mpirun and its daemons) and a job view its CPUs per task, so a step's row shows its own
NTasks and AllocCPUS; a heterogeneous job's script is its ``ID.batch``; ``GET /v1/jobs``
refuses a bad ``before`` or ``detail`` with a 422 that names it, and its pages (``before``:
the last job's ``seq``) hold each job once while newer ones are submitted."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.controller.test_step_route import beat

from fusesched.cli import sacct_format as sf
from fusesched.cli import sacct_steps as st
from fusesched.controller.job_sizes import batch_started, job_size
from fusesched.controller.service import Controller
from fusesched.submit.sbatch import parse_sbatch

FIELDS = sf.parse_format("JobID,NTasks,AllocCPUS,CPUTimeRaw")


def step(client: TestClient, job: str, slots: int, launches: int) -> list[str]:
    """Step of ``slots`` tasks on n0, started as ``launches`` processes (one: mpirun)."""
    task = {"node": "n0", "argv": ["sleep", "60"]}
    body = {"slots": {"n0": slots}, "tasks": [task] * launches}
    answer = client.post(f"/v1/jobs/{job}/steps", json=body)
    assert answer.status_code == 201, answer.text
    return list(answer.json()["task_ids"])


def daemon(client: TestClient, job: str, step_id: int) -> str:
    body = {"node": "n0", "argv": ["orted"], "step": step_id}
    answer = client.post(f"/v1/jobs/{job}/remote", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["task_id"])


def detailed(client: TestClient, job: str) -> dict[str, Any]:
    answer = client.get(f"/v1/jobs?detail=true&id={job}")
    assert answer.status_code == 200, answer.text
    (shown,) = answer.json()
    return dict(shown)


def step_table(shown: dict[str, Any]) -> dict[str, list[str]]:
    rows = st.step_rows(shown, sf.sacct_state(shown))
    return {view["id"]: sf.values(FIELDS, view, used, 0.0)[1:] for view, used in rows}


def test_a_steps_ntasks_and_cpus_are_its_own(ctl: Controller, client: TestClient) -> None:
    request = parse_sbatch("#!/bin/sh\nsleep 60\n", args=["-n", "2", "-c", "2"]).request
    (job,) = ctl.submit([request])
    ctl.run_cycle()
    (batch,) = beat(ctl, [])
    plain = step(client, job, 2, 2)  # srun -n 2: two tasks, a slot each
    beat(ctl, [batch.task_id, *plain])
    beat(ctl, [batch.task_id], ended=plain)
    mpi = step(client, job, 1, 1)  # srun --mpi -n 1: mpirun, and two daemons of it
    daemons = [daemon(client, job, 1), daemon(client, job, 1)]
    beat(ctl, [batch.task_id, *mpi, *daemons])
    ctl.persist.flush()

    shown = detailed(client, job)
    assert shown["cpus"] == 4.0 and shown["cpus_per_task"] == 2.0
    sizes = {t["task_id"]: t["step_tasks"] for t in shown["tasks"]}
    assert [sizes[t] for t in plain] == [2, 2]
    assert sizes[mpi[0]] == 1  # (mpirun holds the step's one slot)
    assert [sizes[t] for t in daemons] == [None, None]  # (a daemon holds none)
    assert sizes[batch.task_id] is None
    table = step_table(shown)
    assert table[f"{job}.0"][:2] == ["2", "4"]  # its 2 tasks × 2 CPUs each
    assert table[f"{job}.1"][:2] == ["1", "2"]  # one rank (not its 3 processes) × 2 CPUs
    assert table[f"{job}.batch"][:2] == ["1", "4"]  # (the job's CPUs on its one node)


def test_a_heterogeneous_jobs_script_is_its_batch_step(ctl: Controller, client: TestClient) -> None:
    het = ["-n1", "-c2", "--mem=1G", ":", "-n2", "-c1", "--mem-per-cpu=256M"]
    script = parse_sbatch("#!/bin/sh\nsrun --het-group=1 true\n", source="het.sh", args=het)
    (job,) = ctl.submit([script.request])
    ctl.run_cycle()
    (launch,) = beat(ctl, [])
    ctl.persist.flush()
    shown = detailed(client, job)
    assert shown["batch"] is True
    assert shown["cpus_per_task"] is None  # (its components ask 2 and 1)
    assert [view["id"] for view, _ in st.step_rows(shown, "RUNNING")] == [f"{job}.batch"]
    assert batch_started(script.request.model_dump(mode="json")) is True
    assert launch.task_id == f"{job}.het0.0"


def test_cpus_per_task_when_every_group_asks_the_same() -> None:
    def size(*cpus: str) -> float | None:
        groups = [{"replicas": 2, "resources": {"cpu": c}} for c in cpus]
        return job_size({"groups": groups}).cpus_per_task

    assert size("2") == 2.0 and size("500m", "500m") == 0.5
    assert size("1", "2") is None and job_size({"groups": "x"}).cpus_per_task is None


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("before=-1", "before"),
        ("before=abc", "before"),
        ("before=99999999999999999999", "before"),
        ("detail=maybe", "detail"),
    ],
)
def test_a_bad_page_or_detail_is_a_422_that_names_it(
    client: TestClient, query: str, said: str
) -> None:
    answer = client.get(f"/v1/jobs?{query}")
    assert answer.status_code == 422, answer.text
    assert said in answer.text


def test_pages_while_jobs_are_submitted_hold_each_job_once(
    ctl: Controller, client: TestClient
) -> None:
    request = parse_sbatch("#!/bin/sh\ntrue\n", args=["--hold"]).request
    first = [ctl.submit([request])[0] for _ in range(5)]
    seen: list[str] = []
    before = ""
    while True:
        answer = client.get(f"/v1/jobs?limit=2&detail=true{before}")
        assert answer.status_code == 200, answer.text
        page = answer.json()
        seen.extend(job["id"] for job in page)
        ctl.submit([request])  # (a newer job each page: never in the pages after)
        if len(page) < 2:
            break
        before = f"&before={page[-1]['seq']}"
    assert seen == list(reversed(first))
