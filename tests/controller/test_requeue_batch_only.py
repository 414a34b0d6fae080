"""Only a batch job is requeued (Slurm: "Only batch jobs are accepted or processed"):
salloc's allocation (its holder, attended or ``--no-shell``), a ``run`` job and a
``run --pty`` job are refused, ended or running (409, saying it is no batch job), and are
left as they were."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.controller.test_dependency_kinds import exit_task, launched, view

from fusesched.controller.service import Controller
from fusesched.submit.salloc_holder import HOLDER

HOLDS = {"resources": {"cpu": "4"}, "script": "#!/bin/sh\n" + HOLDER}
RUNS = {"resources": {"cpu": "4"}, "argv": ["true"]}
SHELL = {"resources": {"cpu": "4"}, "argv": ["/bin/sh"]}

KINDS: dict[str, tuple[dict[str, Any], str]] = {  # payload, what the refusal calls it
    "salloc": ({"groups": [HOLDS], "attended": True}, "salloc's allocation"),
    "salloc --no-shell": ({"groups": [HOLDS]}, "salloc's allocation"),
    "run": ({"groups": [RUNS], "attended": True}, "a run job, which a command waits on"),
    "run --pty": ({"groups": [SHELL], "attended": True, "pty": {}}, "a run --pty job"),
}


def started(ctl: Controller, client: TestClient, payload: dict[str, Any]) -> tuple[str, str]:
    made = client.post("/v1/jobs", json=payload)
    assert made.status_code == 201, made.text
    job = str(made.json()["id"])
    return job, launched(ctl)[job]


@pytest.mark.parametrize("kind", list(KINDS))
def test_an_ended_non_batch_job_is_not_requeued(
    ctl: Controller, client: TestClient, kind: str
) -> None:
    payload, what = KINDS[kind]
    job, task = started(ctl, client, payload)
    exit_task(ctl, task, 0)
    assert view(client, job)["state"] == "Completed"
    answer = client.post(f"/v1/jobs/{job}/requeue", json={})
    assert answer.status_code == 409, answer.text
    expected = f"job {job} is not a batch job ({what}): only batch jobs are requeued"
    assert answer.json()["detail"] == expected
    assert view(client, job)["state"] == "Completed" and view(client, job)["restarts"] == 0
    assert launched(ctl) == {}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_running_non_batch_job_is_not_requeued(
    ctl: Controller, client: TestClient, kind: str
) -> None:
    payload, what = KINDS[kind]
    job, _ = started(ctl, client, payload)
    answer = client.post(f"/v1/jobs/{job}/requeue", json={"hold": True})
    assert answer.status_code == 409, answer.text
    assert f"is not a batch job ({what})" in answer.json()["detail"]
    assert view(client, job)["state"] == "Running"
    assert ctl.jobs[job].requeue is None and ctl.jobs[job].stopping is None


def test_a_batch_job_is_requeued_still(ctl: Controller, client: TestClient) -> None:
    script = {"resources": {"cpu": "4"}, "script": "#!/bin/sh\ntrue\n"}
    job, task = started(ctl, client, {"groups": [script]})
    exit_task(ctl, task, 0)
    assert client.post(f"/v1/jobs/{job}/requeue", json={}).status_code == 200
    assert list(launched(ctl)) == [job]
